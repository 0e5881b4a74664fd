"""constant_value: values known before run time, and the static shapes they give to shape-like inputs."""

from __future__ import annotations

import numpy as np

from snippets_core.frontends import builder as sb
from snippets_core.ir import ElementType, Node, Shape
from snippets_core.ir.const_eval import constant_value
from snippets_core.ir.ops.io import Constant, Parameter


class ShapeOfForTest(Node):
    """A minimal ShapeOf (the real Shape op lives in another module); not registered in OPS."""

    _abstract = True
    type_name = "ShapeOf"

    def infer(self):
        s = self.input_shape(0)
        return [(ElementType.i64, Shape([s.rank] if s.rank_is_static else [None]))]

    def evaluate(self, *args):
        return [np.array(np.shape(args[0]), np.int64)]


def test_constant_and_parameter():
    c = Constant(np.array([1, 2], np.int32))
    assert constant_value(c).tolist() == [1, 2]
    assert constant_value(Parameter("f32", [2])) is None
    assert constant_value(sb.add(sb.parameter([2], "f32"), 1.0)) is None


def test_folds_arithmetic_on_constants_in_the_output_type():
    v = constant_value(sb.multiply(sb.constant(np.array([1.5, 2.0], np.float16)), 2.0))
    assert v.dtype == np.float16 and v.tolist() == [3.0, 4.0]
    s = sb.concat([sb.constant(np.array([2], np.int64)), sb.constant(np.array([-1], np.int64))], 0)
    assert constant_value(s).tolist() == [2, -1]


def test_shape_of_with_static_input_is_known():
    x = sb.parameter([2, 3, 4], "f32")
    s = ShapeOfForTest(x)
    assert constant_value(s).tolist() == [2, 3, 4]
    # Reshape(x, concat(shape(x)[0:1], [-1])) gets a static output shape
    first = sb.gather(s.output, [0], 0)
    target = sb.concat([first, sb.constant(np.array([-1], np.int64))], 0)
    r = sb.reshape(x, target)
    assert r.shape == Shape([2, 12])


def test_shape_of_with_dynamic_input_is_unknown_but_rank_is_kept():
    x = sb.parameter([None, 3, 4], "f32")
    s = ShapeOfForTest(x)
    assert constant_value(s) is None
    r = sb.reshape(x, s.output)
    assert r.shape == Shape([None, None, None])


def test_values_follow_graph_edits():
    c = sb.constant(np.array([3, 4], np.int64))
    neg = sb.negative(c)
    assert constant_value(neg).tolist() == [-3, -4]
    neg.node.set_input(0, sb.constant(np.array([7], np.int64)))
    assert constant_value(neg).tolist() == [-7]


def test_long_chains_do_not_hit_the_recursion_limit():
    v = sb.constant(np.array([1], np.int64))
    for _ in range(3000):
        v = sb.add(v, 1)
    assert constant_value(v).tolist() == [3001]
    p = sb.parameter([1], "i64")
    w = p
    for _ in range(3000):
        w = sb.add(w, 1)
    assert constant_value(w) is None


def test_a_cycle_reads_as_unknown():
    a = sb.negative(sb.constant(np.array([1], np.int64)))
    b = sb.negative(a)
    a.node.set_input(0, b)
    assert constant_value(b) is None
