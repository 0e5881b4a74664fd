"""The HLD-style schedule text of a blob, compared with the expected text."""

from __future__ import annotations

from snippets_shave import reference_kernels as rk
from snippets_shave.abi import CLAMP_PARAMS
from snippets_shave.blob import write_blob
from snippets_shave.constants import DType
from snippets_shave.inspect import format_schedule
from snippets_shave.schedule import ScheduleBuilder

EXPECTED = """\
module @clamp_net attributes {VPU.arch = "37xx"} {
  module @VPU.SW {
    func.func private @clamp_f16(memref<*xf16, @CMX_NN>, memref<*xf16, @CMX_NN>, f32, f32) attributes {VPU.kernel_code = "kernel_data[0]", VPU.kernel_entry = "clamp_f16", VPU.entry_offset = 0}
    func.func private @runtime() attributes {VPU.kernel_code = "native"}
  }
  func.func @main(%x: memref<2x40xf16, @NetworkInput>) -> (memref<2x40xf16, @NetworkOutput>) {
    %b0 = VPURT.DeclareVirtualBarrier {producers = 1, consumers = 1}
    %b1 = VPURT.DeclareVirtualBarrier {producers = 1, consumers = 1}
    VPURT.TaskList @DMA [engine 0] {
      VPURT.Task updates(%b0) {  // in (id 0)
        VPUIP.DMA {port = 0} inputs(memref<2x40xf16, [@NetworkInput, 0] + 0>) outputs(memref<2x40xf16, [@CMX_NN, 1] + 8192>)
      }
    }
    VPURT.TaskList @DMA [engine 1] {
      VPURT.Task waits(%b1) {  // out (id 2)
        VPUIP.DMA {port = 1} inputs(memref<2x40xf16, [@CMX_NN, 1] + 8448>) outputs(memref<2x40xf16, [@NetworkOutput, 0] + 0>)
      }
    }
    VPURT.TaskList @ACT_SHAVE [tile 1] {
      VPURT.Task waits(%b0) updates(%b1) {  // clamp (id 1)
        VPUIP.SW.Kernel @VPU.SW::@clamp_f16 on tile 1 inputs(memref<2x40xf16, [@CMX_NN, 1] + 8192> as %arg0) outputs(memref<2x40xf16, [@CMX_NN, 1] + 8448> as %arg1) {
          VPUIP.SW.Kernel.run {attrs = [0.0, 6.0]}(%arg0, %arg1)
        }
      }
    }
  }
  VPURT.Graph {
    act_shaves : {runtime: @VPU.SW::@runtime, stack_configuration: [4096, 4096]}
    target : {tiles = 2, shaves_per_tile = 2, cmx_bytes_per_tile = 2097152, dma_engines = 2}
  }
}
"""


def test_clamp_schedule_text() -> None:
    sb = ScheduleBuilder("clamp_net")
    x, y = sb.add_input("x", (2, 40), DType.F16), sb.add_output("y", (2, 40), DType.F16)
    k = sb.add_kernel(rk.clamp("f16"))
    base = sb.cmx_workspace_start
    cin, cout = sb.cmx(1, base, (2, 40), DType.F16), sb.cmx(1, base + 256, (2, 40), DType.F16)
    b0, b1 = sb.new_barrier(), sb.new_barrier()
    sb.dma(x, cin, update=[b0], name="in")
    sb.act(k, 1, [cin, cout], {"min": 0.0, "max": 6.0}, wait=[b0], update=[b1], name="clamp", layout=CLAMP_PARAMS)
    sb.dma(cout, y, engine=1, wait=[b1], name="out")
    assert format_schedule(write_blob(sb.build())) == EXPECTED
