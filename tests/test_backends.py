"""myops.backends: options set, read back, restored, refused with a clear error."""
import pytest

import myops.backends as B
from conftest import SESSION_OPTIONS, TEST_OPTIONS


def test_defaults_and_round_trip():
    # (conftest forces our conv and NCHW on the CPU, and sets the run's --myops-option values)
    assert B.get_options() == {**B.DEFAULTS, **TEST_OPTIONS, **SESSION_OPTIONS}
    previous = B.set_options(winograd=False, gn_followers=3, nhwc_staging="always", conv_source="cudnn")
    assert previous == {"winograd": True, "gn_followers": None, "nhwc_staging": "auto", "conv_source": "myops"}
    got = B.get_options()
    assert (got["winograd"], got["gn_followers"], got["nhwc_staging"], got["conv_source"]) == (False, 3, "always",
                                                                                               "cudnn")
    B.set_options(**previous)
    assert B.get_options()["gn_followers"] is None


def test_context_manager_restores_on_error():
    before = B.get_options()
    with pytest.raises(RuntimeError):
        with B.options(tma=False, bn_stats_blocks=2):
            assert B.get_options()["tma"] is False and B.get_options()["bn_stats_blocks"] == 2
            raise RuntimeError("inside")
    assert B.get_options() == before


def test_conv_engines():
    with B.conv_engines("mma", force_wgmma=False):
        assert {e: B.get_options()[e] for e in B.CONV_ENGINES} == {"direct": False, "few_channels": False,
                                                                  "mma": True, "wgmma": False}
    assert all(B.get_options()[e] for e in B.CONV_ENGINES)
    with pytest.raises(ValueError, match="conv_engines: unknown engine"):
        with B.conv_engines("cutlass"):
            pass


@pytest.mark.parametrize("kwargs, message", [
    ({"no_such_option": 1}, "no option 'no_such_option'"),
    ({"direct": 1}, "option 'direct' takes True or False"),
    ({"nhwc_staging": "sometimes"}, "option 'nhwc_staging' takes one of"),
    ({"conv_source": "cutlass"}, "option 'conv_source' takes one of"),
    ({"gn_followers": -2}, "option 'gn_followers' takes None"),
    ({"gelu_vectors": 2.0}, "option 'gelu_vectors' takes None"),
])
def test_bad_values_name_the_option(kwargs, message):
    before = B.get_options()
    with pytest.raises(ValueError, match=message):
        B.set_options(winograd=False, **kwargs)  # nothing is set when any value is refused
    assert B.get_options() == before


def test_parse_assignment_as_command_lines_give_it():
    assert B.parse_assignment("winograd=0") == ("winograd", False)
    assert B.parse_assignment("tma=on") == ("tma", True)
    assert B.parse_assignment("gn_followers=3") == ("gn_followers", 3)
    assert B.parse_assignment("gn_followers=None") == ("gn_followers", None)
    assert B.parse_assignment("cpu_channels_last=never") == ("cpu_channels_last", "never")
    for bad in ("winograd", "no_such_option=1"):
        with pytest.raises(ValueError, match="expected NAME=VALUE"):
            B.parse_assignment(bad)
