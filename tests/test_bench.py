"""The bench CLI (CPU mode, as CI runs it) and its timing helper."""
import json

import pytest

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
        assert r["myops_grad_rel_l2"] < 1e-6  # the input's gradient against float64 eager PyTorch's
        assert r["myops_peak_mib"] is None  # peak memory: CUDA only


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
