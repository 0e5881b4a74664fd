"""The reference tokenizer's unit cases (``src/common/snippets/tests/src/pass/collapse_subgraph.cpp``).

Each graph is built as the reference's test model builders build it (``ov_snippets_models``:
subgraph_simple.cpp, subgraph_convert.cpp, subgraph_fq.cpp); the expected node and Subgraph counts
are those of the builders' ``initReference`` models. The reference runs these cases with an
unlimited data-pointer budget and a callback that vetoes MatMul; so do we. Every case also checks that
the tokenized model computes exactly what the original did.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from snippets_core.frontends import builder as sb
from snippets_core.ir import ElementType, Model
from snippets_core.tokenization import TokenizationConfig

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling helper module importable
from tok_helpers import body_types, outer_types, subgraphs, tokenize_and_compare

UNLIMITED = 2**31


def veto_matmul(node):  # the reference test's transformation callback
    return "MatMul is left to the MHA tokenizer" if node.type_name == "MatMul" else None


REFERENCE_CONFIG = TokenizationConfig(data_ptr_gpr_count=UNLIMITED, callback=veto_matmul)


def eltwise_function(s0, s1) -> Model:
    """EltwiseFunction: Multiply(Add(d0, d1), Subtract(Add, Constant of d1's shape))."""
    d0 = sb.parameter(s0, name="data0")
    d1 = sb.parameter(s1, name="data1")
    const = sb.constant(np.full(s1, 3.25, np.float32), name="const_data")  # one value, d1's shape
    add = sb.add(d0, d1, name="add")
    sub = sb.subtract(add, const, name="sub")
    mul = sb.multiply(add, sub, name="mul")
    return sb.model([mul], name="Eltwise")


def test_eltwise() -> None:
    m = eltwise_function([2, 3], [1, 3])
    tokenize_and_compare(m, REFERENCE_CONFIG)
    (sg,) = subgraphs(m)
    # The non-scalar constant becomes the third input of the Subgraph.
    assert [i.source.node.name for i in sg.inputs] == ["data0", "data1", "const_data"]
    assert body_types(sg) == ["Add", "Subtract", "Multiply"]
    assert outer_types(m) == ["Parameter", "Parameter", "Constant", "Subgraph", "Result"]
    assert sg.name == "mul"
    assert sg.rt_info["originalLayersNames"] == "add,sub,mul"


def matmul_eltwise_branches_function(s0, s1) -> Model:
    """MatMulEltwiseBranchesFunction: two eltwise branches after a MatMul of two Sinh, joined by an Add."""
    d1, d2 = sb.parameter(s0, name="data_1"), sb.parameter(s1, name="data_2")
    mm = sb.matmul(sb.sinh(d1), sb.sinh(d2), name="non_snippet_op")
    c = [np.float32(v) for v in (-4.5, 2.25, 7.0, -1.5)]
    elu = sb.elu(sb.add(sb.multiply(mm, sb.constant([c[0]])), sb.constant([c[1]])), 0.01)
    relu = sb.relu(sb.subtract(sb.multiply(mm, sb.constant([c[2]])), sb.constant([c[3]])))
    return sb.model([sb.add(elu, relu)], name="MatMulEltwiseBranches")


def test_matmul_with_eltwise() -> None:
    m = matmul_eltwise_branches_function([1, 3, 4, 4], [1, 3, 4, 4])
    tokenize_and_compare(m, REFERENCE_CONFIG)
    (sg,) = subgraphs(m)
    # Both branches share the MatMul output: one Subgraph input; the four scalar constants are inside.
    assert [i.source.node.type_name for i in sg.inputs] == ["MatMul"]
    assert sorted(body_types(sg)) == sorted(["Multiply", "Add", "Elu", "Multiply", "Subtract", "Relu", "Add"])
    assert body_types(sg, with_constants=True).count("Constant") == 4
    assert outer_types(m).count("Sinh") == 2 and outer_types(m).count("MatMul") == 1


def test_matmul_with_eltwise_without_veto_takes_the_matmul() -> None:
    # A rank-4 f32 MatMul is a supported op; without the reference test's veto it joins the Subgraph.
    m = matmul_eltwise_branches_function([1, 3, 4, 4], [1, 3, 4, 4])
    tokenize_and_compare(m, TokenizationConfig(data_ptr_gpr_count=UNLIMITED))
    (sg,) = subgraphs(m)
    assert "MatMul" in body_types(sg) and [i.source.node.type_name for i in sg.inputs] == ["Sinh", "Sinh"]


def test_avoid_loop_eltwise() -> None:
    """EltwiseLogLoopFunction: Log (not tokenizable) reads Add and feeds Multiply, which also reads HSwish(Add).
    Merging Multiply into {Add, HSwish} would make a cycle through Log."""
    d0, d1 = sb.parameter([2, 5], name="data0"), sb.parameter([2, 1], name="data1")
    add = sb.add(d0, d1)
    mul = sb.multiply(sb.hswish(add), sb.log(add))
    m = sb.model([mul])
    tokenize_and_compare(m, REFERENCE_CONFIG, positive_inputs=True)
    first, second = subgraphs(m)
    assert body_types(first) == ["Add", "HSwish"]
    assert body_types(second) == ["Multiply"]
    # The parent's outputs with outside consumers come first: Add (for Log) is output 0, HSwish output 1.
    assert len(first.outputs) == 2
    assert first.outputs[0].targets[0].node.type_name == "Log"
    assert second.inputs[0].source is first.outputs[1]
    assert second.inputs[1].source.node.type_name == "Log"
    assert outer_types(m) == ["Parameter", "Parameter", "Subgraph", "Log", "Subgraph", "Result"]


def test_one_convert() -> None:
    m = sb.model([sb.convert(sb.parameter([2, 5], "f32"), "u8")])
    tokenize_and_compare(m, REFERENCE_CONFIG)
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["Convert"] and outer_types(m) == ["Parameter", "Subgraph", "Result"]


def test_convert_input() -> None:
    d0, d1 = sb.parameter([2, 5], "f32"), sb.parameter([1, 5], "u8")
    m = sb.model([sb.add(sb.convert(d0, "u8"), d1)])
    tokenize_and_compare(m, REFERENCE_CONFIG)
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["Convert", "Add"] and len(sg.inputs) == 2


def test_convert_output() -> None:
    d0, d1 = sb.parameter([2, 5], "f32"), sb.parameter([1, 5], "f32")
    m = sb.model([sb.convert(sb.add(d0, d1), "i8")])
    tokenize_and_compare(m, REFERENCE_CONFIG)
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["Add", "Convert"] and sg.outputs[0].element_type is ElementType.i8


def test_convert_stub() -> None:
    d0, d1 = sb.parameter([2, 5, 2], "f32"), sb.parameter([1, 5, 1], "f32")
    m = sb.model([sb.relu(sb.convert(sb.add(d0, d1), "i8"))])
    tokenize_and_compare(m, REFERENCE_CONFIG)
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["Add", "Convert", "Relu"]


def test_convert_partial_inputs_and_results() -> None:
    """ConvertPartialInputsAndResultsFunction (i8, bf16, f32 inputs; f32 and i8 outputs). The reference's
    stub after Subtract is a Roll, not in this op set; Sin is the stand-in (also not tokenizable)."""
    d0 = sb.parameter([2, 5, 1], "i8", name="d0")
    d1 = sb.parameter([1, 5, 1], "bf16", name="d1")
    d2 = sb.parameter([2, 1, 10], "f32", name="d2")
    relu = sb.relu(sb.add(sb.convert(d0, "f32"), sb.convert(d1, "f32")))
    stub = sb.sin(sb.subtract(relu, d2))
    convert2 = sb.convert(relu, "i8")
    m = sb.model([convert2, stub])
    tokenize_and_compare(m, REFERENCE_CONFIG)
    (sg,) = subgraphs(m)
    assert sorted(body_types(sg)) == sorted(["Convert", "Convert", "Add", "Relu", "Subtract", "Convert"])
    assert [i.source.node.name for i in sg.inputs] == ["d0", "d1", "d2"]
    assert sorted(o.element_type.value for o in sg.outputs) == ["f32", "i8"]
    assert outer_types(m) == ["Parameter", "Parameter", "Parameter", "Subgraph", "Result", "Sin", "Result"]


def eltwise_two_results_function() -> Model:
    d0, d1 = sb.parameter([2, 5], name="data0"), sb.parameter([2, 1], name="data1")
    add = sb.add(d0, d1, name="add")
    relu = sb.relu(sb.hswish(add, name="hswish"), name="relu")
    add.names |= {"add_out", "y0"}
    relu.names |= {"relu_out", "y1"}
    return sb.model([sb.result(add, name="res0").node, sb.result(relu, name="res1").node])


def test_eltwise_two_results() -> None:
    m = eltwise_two_results_function()
    tokenize_and_compare(m, REFERENCE_CONFIG)
    first, second = subgraphs(m)
    # Relu would give the Subgraph a second Result child: it starts its own Subgraph.
    assert (first.name, body_types(first)) == ("add", ["Add", "HSwish"])
    assert (second.name, body_types(second)) == ("relu", ["Relu"])
    assert second.inputs[0].source is first.outputs[1]
    res0, res1 = m.results
    assert (res0.name, res1.name) == ("res0", "res1")
    assert res0.inputs[0].source is first.outputs[0] and res1.inputs[0].source is second.outputs[0]
    # The tensor names travel with the values (the reference compares NAMES here).
    assert {"add_out", "y0"} <= first.outputs[0].names and {"relu_out", "y1"} <= second.outputs[0].names


def three_fq_function() -> Model:
    """ThreeFQFunction on [1, 3, 20, 20]: per-channel input ranges, scalar output ranges, 256 levels. The
    reference's FQs are type-relaxed (u8/i8 outputs); here FakeQuantize keeps the f32 input type."""
    x = sb.parameter([1, 3, 20, 20], "f32", name="data0")

    def fq(data, il, ih, ol, oh):
        return sb.fake_quantize(data, np.array(il, np.float32).reshape(1, 3, 1, 1),
                                np.array(ih, np.float32).reshape(1, 3, 1, 1), np.array([ol], np.float32),
                                np.array([oh], np.float32), 256)

    fq0 = fq(x, [-397898.40625, -435929.78125, -476583.9375], [394789.84375, 432524.09375, 472860.625], 0, 255)
    fq1 = fq(fq0, [5.390228, 9.7712707, 9.333160], [250.524688, 254.905731, 254.467620], -128, 127)
    fq2 = fq(fq1, [-98.16883, -142.82466, -155.0642700], [97.334106, 141.599884, 153.8145446], 0, 255)
    return sb.model([fq2])


def test_three_fq() -> None:
    m = three_fq_function()
    tokenize_and_compare(m, REFERENCE_CONFIG, scale=3e5)
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["FakeQuantize"] * 3
    # FakeQuantize range constants always go inside the body, scalar or not.
    assert len(sg.inputs) == 1 and body_types(sg, with_constants=True).count("Constant") == 12


def test_three_fq_with_the_x64_pointer_budget() -> None:
    # Each FQ leaves 4 non-scalar constants after decomposition (il, ih, isc, ish are per-channel): two FQs
    # use 1 + 1 + 8 = 10 of the 11 data pointers, the third would need 14: it starts a second Subgraph.
    m = three_fq_function()
    tokenize_and_compare(m, TokenizationConfig(data_ptr_gpr_count=11), scale=3e5)
    first, second = subgraphs(m)
    assert body_types(first) == ["FakeQuantize"] * 2 and body_types(second) == ["FakeQuantize"]
    assert first.rt_info["VirtualPortCount"] == 8 and second.rt_info["VirtualPortCount"] == 4


@pytest.mark.parametrize("mode", ["Enable", "IgnoreCallback"])
def test_reference_cases_keep_outputs(mode: str) -> None:
    for build in (lambda: eltwise_function([2, 3], [1, 3]), eltwise_two_results_function, three_fq_function):
        m = build()
        names = m.output_names
        tokenize_and_compare(m, TokenizationConfig(snippets_mode=mode), scale=3e5)
        assert m.output_names == names
