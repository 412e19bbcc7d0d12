"""The bench CLI (CPU mode, as CI runs it) and its timing helper."""
import json

import pytest
import torch

from myops import bench
from myops._timing import median_ms_each


def test_candidates_are_timed_in_turn():
    calls = []
    fns = {label: (lambda label=label: calls.append(label)) for label in ("eager", "inductor", "myops")}
    times = median_ms_each(fns, "cpu", warmup=1, reps=3)
    # warm-ups first, then one call of each per round, in the given order
    assert calls == ["eager", "inductor", "myops"] * 4
    assert set(times) == set(fns) and all(t >= 0 for t in times.values())


def test_bench_cli_cpu_rows(tmp_path):
    out = tmp_path / "rows.json"
    rows = bench.main(["--device", "cpu", "--workloads", "gelu,group_norm", "--no-compile", "--reps", "1",
                       "--json", str(out)])
    assert [r["workload"] for r in rows] == ["gelu", "group_norm"]
    assert json.loads(out.read_text()) == rows
    for r in rows:
        assert r["eager_ms"] > 0 and r["myops_ms"] > 0
        assert r["myops_rel_l2"] < 1e-6  # float32 against the float64 reference


def test_bench_cli_cpu_training_rows():
    rows = bench.main(["--device", "cpu", "--workloads", "gelu,group_norm", "--no-compile", "--reps", "1", "--train"])
    for r in rows:
        assert r["train"] and r["eager_ms"] > 0 and r["myops_ms"] > 0
        assert r["myops_grad_rel_l2"] < 1e-6 and r["eager_grad_rel_l2"] < 1e-6  # the input's gradient against float64
        # peak memory (on the CPU from the profiler's allocation events): ATen's own kernels here
        assert r["eager_peak_mib"] > 0 and r["myops_peak_mib"] == pytest.approx(r["eager_peak_mib"], rel=0.01)


def test_bench_cli_eager_module_rows():
    # --eager: a chain's myops row is its myops.nn module in eager mode, over the block's own layers
    from myops import workloads
    case = workloads.build("dcgan_bn_relu", "cpu", torch.float32, eager=True)
    assert isinstance(case.myops_fn, torch.nn.Module) and case.myops_fn.conv is case.module.conv
    rows = bench.main(["--device", "cpu", "--workloads", "pix2pix_bn,L2_19", "--no-compile", "--reps", "1",
                       "--train", "--eager"])
    for r in rows:
        assert r["myops_ms"] > 0 and r["myops_grad_rel_l2"] < 1e-5
        # the module's training step holds no more at its peak than eager PyTorch's layers
        assert 0 < r["myops_peak_mib"] <= 1.01 * r["eager_peak_mib"], r


def test_bench_cli_options_hold_for_the_run_only(monkeypatch):
    import myops.backends as B
    seen = []
    real = bench.run_workload

    def spy(*args, **kwargs):
        seen.append(B.get_option("aten_training"))
        return real(*args, **kwargs)
    monkeypatch.setattr(bench, "run_workload", spy)
    bench.main(["--device", "cpu", "--workloads", "gelu", "--no-compile", "--reps", "1", "--train",
                "--option", "aten_training=never"])
    assert seen == ["never"] and B.get_option("aten_training") == "auto"
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        bench.main(["--device", "cpu", "--workloads", "gelu", "--option", "no_such_option=1"])


def test_cuda_only_rows_are_named_on_the_cpu():
    # conv + activation rows exist at CUDA size only (the CPU pass leaves such chains to Inductor):
    # not in the CPU's default list, and asked for by name, a clear error
    from myops import workloads
    assert "vocoder_leaky_relu" in workloads.names("cuda") and "vocoder_leaky_relu" not in workloads.names("cpu")
    with pytest.raises(ValueError, match="myops.bench: no workload 'vocoder_leaky_relu' on cpu"):
        bench.main(["--device", "cpu", "--workloads", "vocoder_leaky_relu", "--no-compile", "--reps", "1"])


def test_one_dimensional_chain_rows_build():
    # the vocoder row's builder (a 1-D chain), at a small size on the CPU: the module and its FLOPs
    from myops import workloads
    case = workloads._vocoder(2, 16, 8, "cpu", torch.float32)
    out = case.module(case.input)
    assert out.shape == (2, 8, 64) and case.flops == 2.0 * case.input.numel() * 8 * 16


def test_plot_without_matplotlib_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # an import of it fails
    rows = bench.main(["--device", "cpu", "--workloads", "gelu", "--no-compile", "--reps", "1",
                       "--plot", str(tmp_path / "bench.png")])
    assert rows and not (tmp_path / "bench.png").exists()
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_plot_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    bench.main(["--device", "cpu", "--workloads", "gelu", "--no-compile", "--reps", "1", "--plot", str(path)])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_rows_and_summary(tmp_path):
    # --sweep on the CPU: the first layers in both layouts, every stock column, the summary lines
    from myops import sweep
    page = tmp_path / "perf.md"
    rows = bench.main(["--device", "cpu", "--sweep", "--sweep-limit", "2", "--sweep-target-ms", "0.2", "--reps", "1",
                       "--no-compile", "--markdown", str(page)])
    assert [(r["layer"], r["layout"]) for r in rows] == [
        (layer.name, layout) for layer in sweep.layers()[:2] for layout in ("nchw", "channels_last")]
    for r in rows:
        assert r["myops_ms"] > 0 and r["ours_ms"] > 0 and r["eager_ms"] > 0 and r["floor_ms"] > 0
        assert ("eager_cl_ms" in r) == (r["layout"] == "nchw")
        assert r["vs_best_stock"] > 0 and r["myops_rel_l2"] < 1e-5
    text = page.read_text()
    assert "layer sweep" in text and "geometric mean" in text and "worst:" in text


def test_sweep_layers_are_distinct_and_sized_to_the_target():
    from myops import sweep
    layers = sweep.layers()
    assert len({layer.name for layer in layers}) == len(layers) >= 50
    ceilings = sweep.Ceilings(flops_per_ms=1e9, bytes_per_ms=1e7)
    for layer in layers:
        n, h, w = sweep.size_for(layer, torch.float32, ceilings, 1.0)
        floor = ceilings.floor_ms(*sweep._flops_bytes(layer, n, h, w, torch.float32))
        assert floor <= 1.0 or (n, h) == (8, 8)  # grown while under the target
        assert all(o > 0 for o in layer.out_hw(h, w))
