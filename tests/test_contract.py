"""pyrms.contract: a kernel's template and launch parameters read from its .cu declaration."""
import pytest

from pyrms import compiler, contract

SOURCE = """
namespace outer {
// a comment with a template <typename X> __global__ void fake(int) that must not be read
template <typename T, int V, bool FLAG, typename W = T, typename O = T>
__global__ void __launch_bounds__(max_threads(V / 2), V > 1 ? 2 : 1) kern(
    O* out, const Pair<T, W>* __restrict__ pair,  // a comment, with a comma
    float eps, int n, long long stride) {
}
template <typename T> __device__ void helper(T x) {}
template <typename OutT>
__global__ void plain(OutT* out, unsigned n) {}
}  // namespace outer
"""


def test_parse_reads_each_global_template_with_its_launch_kinds():
    found = contract.parse(SOURCE, "x.cu")
    assert set(found) == {"kern", "plain"}
    kern = found["kern"]
    assert kern.namespace == "outer"
    assert [(p.name, p.kind, p.default) for p in kern.template] == [
        ("T", "typename", None), ("V", "int", None), ("FLAG", "bool", None), ("W", "typename", "T"),
        ("O", "typename", "T")]
    assert kern.params == (("out", "ptr"), ("pair", "ptr"), ("eps", "f32"), ("n", "i32"), ("stride", "i64"))
    assert found["plain"].signature == ("ptr", "u32")


def test_expression_drops_trailing_defaults_only():
    kern = contract.parse(SOURCE)["kern"]
    assert kern.expression(T="float", V=2, FLAG=True) == "outer::kern<float, 2, true>"
    assert kern.expression(T="float", V=2, FLAG=False, W="float", O="float") == "outer::kern<float, 2, false>"
    # a later argument away from its default spells the earlier default out
    assert kern.expression(T="__half", V=0, FLAG=False, O="float") == "outer::kern<__half, 0, false, __half, float>"
    assert kern.expression(T="__half", V=0, FLAG=False, W="void") == "outer::kern<__half, 0, false, void>"


@pytest.mark.parametrize("values, error, match", [
    (dict(T="float", V=2), KeyError, "'FLAG' has no default"),
    (dict(T="float", V=2, FLAG=True, X=1), KeyError, "no template parameter 'X'"),
    (dict(T="float", V=2, FLAG=1), TypeError, "FLAG is a bool"),
    (dict(T="float", V=True, FLAG=True), TypeError, "V is an int"),
])
def test_expression_names_a_bad_argument(values, error, match):
    with pytest.raises(error, match=match):
        contract.parse(SOURCE)["kern"].expression(**values)


def test_every_kernel_source_parses_and_every_parameter_has_a_launch_kind():
    names = set()
    for path in sorted(compiler.source_dir().glob("*.cu*")):
        for name, c in contract.parse(path.read_text(), path.name).items():
            assert c.namespace in ("pyrms", "transformer") and c.template and c.params, (path.name, name)
            names.add(name)
    assert {"rms_norm_kernel", "rms_norm_nd_kernel", "fused_add_rms_norm_kernel", "layer_norm_kernel",
            "layer_norm_backward_kernel", "rms_norm_backward_kernel", "sum_partials_kernel",
            "rms_norm_quant_kernel", "rms_norm_group_quant_kernel"} <= names


def test_contract_names_the_kernels_of_a_source_it_lacks():
    with pytest.raises(KeyError, match="rms_norm.cu has no __global__ kernel template 'nope'; it has rms_norm_kernel"):
        contract.contract("rms_norm.cu", "nope")
