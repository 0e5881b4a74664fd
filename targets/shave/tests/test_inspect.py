"""The HLD-style schedule text of a blob, compared with the expected text."""

from __future__ import annotations

from snippets_shave import reference_kernels as rk
from snippets_shave.abi import CLAMP_PARAMS
from snippets_shave.blob import write_blob
from snippets_shave.constants import DType
from snippets_shave.inspect import format_schedule
from snippets_shave.runtime_kernel import runtime_kernel_elf
from snippets_shave.schedule import ScheduleBuilder
from snippets_shave.vpurt.ir import Payload

EXPECTED = """\
module @clamp_net attributes {VPU.arch = "37xx", VPU.version = "1.3.0", VPU.producer = "snippets"} {
  module @VPU.SW {
    func.func private @clamp_f16(%m0: memref<*xf16, @CMX_NN>, %m1: memref<*xf16, @CMX_NN>, %s0: f32, %s1: f32) attributes {VPU.kernel_code = "CODE_DIGEST", VPU.code_size = CODE_SIZE, VPU.entry_offset = 0, VPU.abi_version = 1, VPU.kind = "COMPUTE"}
    func.func private @runtime() attributes {VPU.kernel_code = "RUNTIME_DIGEST", VPU.code_size = RUNTIME_SIZE, VPU.entry_offset = 0, VPU.abi_version = 1, VPU.kind = "COMPUTE"}
  }
  func.func @main(ref<"x", 2x40xf16, @NetworkInput[0] + 0>) -> (ref<"y", 2x40xf16, @NetworkOutput[0] + 0>) attributes {VPU.scratch_bytes = 0} {
    %b0 = VPURT.ConfigurePhysicalBarrier <0> {producers = 1, consumers = 1}
    %b1 = VPURT.ConfigurePhysicalBarrier <1> {producers = 1, consumers = 1}
    VPURT.TaskList @DMA [engine 0] {
      VPURT.Task {id = 0, name = "in"} updates(%b0) {
        VPUIP.DMA {port = 0} inputs(ref<"x", 2x40xf16, @NetworkInput[0] + 0>) outputs(ref<"cmx1@8192", 2x40xf16, @CMX_NN[1] + 8192>)
      }
    }
    VPURT.TaskList @DMA [engine 1] {
      VPURT.Task {id = 2, name = "out"} waits(%b1) {
        VPUIP.DMA {port = 1} inputs(ref<"cmx1@8448", 2x40xf16, @CMX_NN[1] + 8448>) outputs(ref<"y", 2x40xf16, @NetworkOutput[0] + 0>)
      }
    }
    VPURT.TaskList @ACT_SHAVE [tile 1] {
      VPURT.Task {id = 1, name = "clamp"} waits(%b0) updates(%b1) {
        VPUIP.SW.Kernel @VPU.SW::@clamp_f16 on tile 1 inputs(ref<"cmx1@8192", 2x40xf16, @CMX_NN[1] + 8192> as %arg0) outputs(ref<"cmx1@8448", 2x40xf16, @CMX_NN[1] + 8448> as %arg1) {
          %s0 = arith.constant 0.0 : f32
          %s1 = arith.constant 6.0 : f32
          VPUIP.SW.Kernel.run(%arg0, %arg1, %s0, %s1)
        }
      }
    }
  }
  VPURT.Graph {
    act_shaves : {runtime = @VPU.SW::@runtime, stack_configuration = [4096, 4096], runtime_version = 2}
    target : {tiles = 2, shaves_per_tile = 2, cmx_bytes_per_tile = 2097152, dma_engines = 2, max_barriers = 64, dpus_per_tile = 1}
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
    code = Payload.of(rk.clamp("f16"))  # the kernel's bytes are the reference kernels' business, not this test's
    runtime = Payload.of(runtime_kernel_elf())
    expected = EXPECTED.replace("CODE_DIGEST", code.digest).replace("CODE_SIZE", str(code.size))
    expected = expected.replace("RUNTIME_DIGEST", runtime.digest).replace("RUNTIME_SIZE", str(runtime.size))
    assert format_schedule(write_blob(sb.build())) == expected
