"""Every instruction of the DSL round-trips: our encoding, decoded by iced's Decoder and printed by iced's
Formatter, reads as the expected text written here. The oracle is iced's decoder, not our encoder."""

from __future__ import annotations

import pytest
from iced_x86 import Decoder, Formatter, FormatterSyntax

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import *
from snippets_x86_64.asm import CMP_PREDICATES, MNEMONICS, Assembler, bcst, byte, dword, qword


def iced_text(code: bytes, ip: int = 0) -> list[str]:
    """Decode with iced and format in Intel syntax (hex as 0x.., a space after commas)."""
    fmt = Formatter(FormatterSyntax.INTEL)
    fmt.hex_prefix, fmt.hex_suffix, fmt.uppercase_hex = "0x", "", False
    fmt.space_after_operand_separator = True
    fmt.show_branch_size = False
    fmt.branch_leading_zeros = False
    out = []
    for instr in Decoder(64, code, ip=ip):
        assert not instr.is_invalid, code.hex()
        out.append(fmt.format(instr))
    return out


def encode_one(mnemonic: str, operands: tuple, kwargs: dict) -> bytes:
    a = Assembler()
    a.emit(mnemonic, *operands, **kwargs)
    return a.encode()


# (mnemonic, operands, keyword arguments, what iced decodes)
CASES = [
    ("mov", (rax, rdi), {}, "mov rax, rdi"),
    ("mov", (r9d, 0x7FFFFFFF), {}, "mov r9d, 0x7fffffff"),
    ("mov", (rax, 0x123456789), {}, "mov rax, 0x123456789"),
    ("mov", (qword[rsi + 8], -1), {}, "mov qword ptr [rsi+8], 0xffffffffffffffff"),
    ("mov", (rdx, rsp + 16), {}, "mov rdx, [rsp+0x10]"),
    ("movzx", (eax, byte[rsi + 3]), {}, "movzx eax, byte ptr [rsi+3]"),
    ("movsxd", (rax, dword[rsi]), {}, "movsxd rax, [rsi]"),
    ("lea", (rax, rsi + rcx * 4 + 64), {}, "lea rax, [rsi+rcx*4+0x40]"),
    ("add", (rax, 1), {}, "add rax, 1"),
    ("add", (r12, 0x1000), {}, "add r12, 0x1000"),
    ("sub", (rsp, 128), {}, "sub rsp, 0x80"),
    ("imul", (rax, rcx), {}, "imul rax, rcx"),
    ("imul", (r8, r9, 12), {}, "imul r8, r9, 0xc"),
    ("div", (rcx,), {}, "div rcx"),
    ("div", (qword[r10 + 8],), {}, "div qword ptr [r10+8]"),
    ("and", (rsp, -64), {}, "and rsp, 0xffffffffffffffc0"),
    ("or", (eax, 1), {}, "or eax, 1"),
    ("xor", (eax, eax), {}, "xor eax, eax"),
    ("neg", (rcx,), {}, "neg rcx"),
    ("not", (rdx,), {}, "not rdx"),
    ("shl", (rax, 2), {}, "shl rax, 2"),
    ("shl", (r10, cl), {}, "shl r10, cl"),
    ("shr", (rax, 1), {}, "shr rax, 1"),
    ("sar", (r11, 31), {}, "sar r11, 0x1f"),
    ("cmp", (rcx, 16), {}, "cmp rcx, 0x10"),
    ("test", (rax, rax), {}, "test rax, rax"),
    ("inc", (r13,), {}, "inc r13"),
    ("dec", (rcx,), {}, "dec rcx"),
    ("push", (rbx,), {}, "push rbx"),
    ("push", (r12,), {}, "push r12"),
    ("pop", (r15,), {}, "pop r15"),
    ("ret", (), {}, "ret"),
    ("call", (rax,), {}, "call rax"),
    ("jmp", (rax,), {}, "jmp rax"),
    ("nop", (), {}, "nop"),
    ("cpuid", (), {}, "cpuid"),
    ("xgetbv", (), {}, "xgetbv"),
    ("vmovups", (zmm0, rsi + 0), {}, "vmovups zmm0, [rsi]"),
    ("vmovups", (zmm1.mask(k1).z, rsi + 64), {}, "vmovups zmm1{k1}{z}, [rsi+0x40]"),
    ("vmovups", ((rdi + 128).mask(k2), zmm3), {}, "vmovups [rdi+0x80]{k2}, zmm3"),
    ("vmovups", (ymm2, rsi + 32), {}, "vmovups ymm2, [rsi+0x20]"),
    ("vmovups", (xmm16, rsi + 16), {}, "vmovups xmm16, [rsi+0x10]"),
    ("vmovaps", (zmm31, rsp + 64), {}, "vmovaps zmm31, [rsp+0x40]"),
    ("vmovaps", (rsp + 128, zmm30), {}, "vmovaps [rsp+0x80], zmm30"),
    ("vmovdqu8", (xmm0.mask(k1).z, rsi + 0), {}, "vmovdqu8 xmm0{k1}{z}, [rsi]"),
    ("vmovdqu8", ((rdi + 16).mask(k1), xmm2), {}, "vmovdqu8 [rdi+0x10]{k1}, xmm2"),
    ("vmovdqu16", (ymm0.mask(k1).z, rsi + 0), {}, "vmovdqu16 ymm0{k1}{z}, [rsi]"),
    ("vmovdqu16", ((rdi + 0).mask(k3), ymm4), {}, "vmovdqu16 [rdi]{k3}, ymm4"),
    ("vmovdqu32", (zmm5.mask(k7).z, rsi + rcx * 4 + 0), {}, "vmovdqu32 zmm5{k7}{z}, [rsi+rcx*4]"),
    ("vmovdqu64", (zmm5, rsi + 0), {}, "vmovdqu64 zmm5, [rsi]"),
    ("vmovss", (xmm0, rsi + 4), {}, "vmovss xmm0, [rsi+4]"),
    ("vmovd", (xmm0, eax), {}, "vmovd xmm0, eax"),
    ("vmovd", (eax, xmm1), {}, "vmovd eax, xmm1"),
    ("vmovq", (xmm2, rax), {}, "vmovq xmm2, rax"),
    ("vbroadcastss", (zmm0, rsi + 0), {}, "vbroadcastss zmm0, [rsi]"),
    ("vbroadcastss", (zmm1, xmm2), {}, "vbroadcastss zmm1, xmm2"),
    ("vpbroadcastd", (zmm0, eax), {}, "vpbroadcastd zmm0, eax"),
    ("vpbroadcastd", (zmm2.mask(k1).z, rdx + 0), {}, "vpbroadcastd zmm2{k1}{z}, [rdx]"),
    ("vpbroadcastw", (zmm0, eax), {}, "vpbroadcastw zmm0, eax"),
    ("vpbroadcastb", (zmm3, xmm4), {}, "vpbroadcastb zmm3, xmm4"),
    ("vaddps", (zmm0, zmm1, zmm2), {}, "vaddps zmm0, zmm1, zmm2"),
    ("vaddps", (zmm0, zmm1, bcst(rdx)), {}, "vaddps zmm0, zmm1, [rdx]{1to16}"),
    ("vaddps", (zmm0.mask(k1).z, zmm1, rsi + 64), {}, "vaddps zmm0{k1}{z}, zmm1, [rsi+0x40]"),
    ("vaddps", (zmm0, zmm1, zmm2), {"rc": "rn"}, "vaddps zmm0{rne-sae}, zmm1, zmm2"),
    ("vsubps", (zmm3, zmm4, zmm5), {}, "vsubps zmm3, zmm4, zmm5"),
    ("vmulps", (zmm6, zmm7, (rsi + 8).broadcast), {}, "vmulps zmm6, zmm7, [rsi+8]{1to16}"),
    ("vdivps", (zmm8.mask(k1), zmm9, zmm10), {}, "vdivps zmm8{k1}, zmm9, zmm10"),
    ("vmaxps", (zmm11, zmm12, zmm13), {"sae": True}, "vmaxps zmm11{sae}, zmm12, zmm13"),
    ("vminps", (zmm14, zmm15, zmm16), {}, "vminps zmm14, zmm15, zmm16"),
    ("vsqrtps", (zmm17, zmm18), {}, "vsqrtps zmm17, zmm18"),
    ("vrcp14ps", (zmm19, zmm20), {}, "vrcp14ps zmm19, zmm20"),
    ("vrsqrt14ps", (zmm21, bcst(rsi)), {}, "vrsqrt14ps zmm21, [rsi]{1to16}"),
    ("vaddss", (xmm0, xmm1, xmm2), {}, "vaddss xmm0, xmm1, xmm2"),
    ("vsubss", (xmm0, xmm1, rsi + 4), {}, "vsubss xmm0, xmm1, [rsi+4]"),
    ("vmulss", (xmm16, xmm1, xmm2), {}, "vmulss xmm16, xmm1, xmm2"),
    ("vdivss", (xmm0, xmm1, xmm2), {}, "vdivss xmm0, xmm1, xmm2"),
    ("vmaxss", (xmm0, xmm1, xmm2), {}, "vmaxss xmm0, xmm1, xmm2"),
    ("vminss", (xmm0, xmm1, xmm2), {}, "vminss xmm0, xmm1, xmm2"),
    ("vfmadd132ps", (zmm0, zmm1, zmm2), {}, "vfmadd132ps zmm0, zmm1, zmm2"),
    ("vfmadd213ps", (zmm0, zmm1, bcst(rax)), {}, "vfmadd213ps zmm0, zmm1, [rax]{1to16}"),
    ("vfmadd231ps", (zmm0.mask(k1).z, zmm1, zmm2), {}, "vfmadd231ps zmm0{k1}{z}, zmm1, zmm2"),
    ("vfmsub132ps", (zmm0, zmm1, zmm2), {}, "vfmsub132ps zmm0, zmm1, zmm2"),
    ("vfmsub213ps", (zmm0, zmm1, zmm2), {}, "vfmsub213ps zmm0, zmm1, zmm2"),
    ("vfmsub231ps", (zmm0, zmm1, zmm2), {}, "vfmsub231ps zmm0, zmm1, zmm2"),
    ("vfnmadd132ps", (zmm0, zmm1, zmm2), {}, "vfnmadd132ps zmm0, zmm1, zmm2"),
    ("vfnmadd213ps", (zmm0, zmm1, zmm2), {}, "vfnmadd213ps zmm0, zmm1, zmm2"),
    ("vfnmadd231ps", (zmm0, zmm1, zmm2), {}, "vfnmadd231ps zmm0, zmm1, zmm2"),
    ("vfnmsub132ps", (zmm0, zmm1, zmm2), {}, "vfnmsub132ps zmm0, zmm1, zmm2"),
    ("vfnmsub213ps", (zmm0, zmm1, zmm2), {}, "vfnmsub213ps zmm0, zmm1, zmm2"),
    ("vfnmsub231ps", (zmm0, zmm1, zmm2), {}, "vfnmsub231ps zmm0, zmm1, zmm2"),
    ("vscalefps", (zmm0, zmm1, zmm2), {}, "vscalefps zmm0, zmm1, zmm2"),
    ("vgetexpps", (zmm0, zmm1), {}, "vgetexpps zmm0, zmm1"),
    ("vgetmantps", (zmm0, zmm1, 8), {}, "vgetmantps zmm0, zmm1, 8"),
    ("vfixupimmps", (zmm0, zmm1, zmm2, 0), {}, "vfixupimmps zmm0, zmm1, zmm2, 0"),
    ("vreduceps", (zmm0, zmm1, 0x13), {}, "vreduceps zmm0, zmm1, 0x13"),
    ("vroundps", (ymm0, ymm1, 9), {}, "vroundps ymm0, ymm1, 9"),
    ("vrndscaleps", (zmm0, zmm1, 1), {}, "vrndscaleps zmm0, zmm1, 1"),
    ("vrangeps", (zmm0, zmm1, zmm2, 0x0A), {}, "vrangeps zmm0, zmm1, zmm2, 0xa"),
    ("vandps", (zmm0, zmm1, bcst(rsi)), {}, "vandps zmm0, zmm1, [rsi]{1to16}"),
    ("vorps", (zmm0, zmm1, zmm2), {}, "vorps zmm0, zmm1, zmm2"),
    ("vxorps", (xmm0, xmm0, xmm0), {}, "vxorps xmm0, xmm0, xmm0"),
    ("vandnps", (zmm0, zmm1, zmm2), {}, "vandnps zmm0, zmm1, zmm2"),
    ("vpandd", (zmm0, zmm1, zmm2), {}, "vpandd zmm0, zmm1, zmm2"),
    ("vpandnd", (zmm0, zmm1, zmm2), {}, "vpandnd zmm0, zmm1, zmm2"),
    ("vpord", (zmm0, zmm1, bcst(rdx)), {}, "vpord zmm0, zmm1, [rdx]{1to16}"),
    ("vpxord", (zmm0, zmm0, zmm0), {}, "vpxord zmm0, zmm0, zmm0"),
    ("vpternlogd", (zmm0, zmm1, zmm2, 0xCA), {}, "vpternlogd zmm0, zmm1, zmm2, 0xca"),
    ("vcmpps", (k1, zmm0, zmm1, 0), {}, "vcmpeqps k1, zmm0, zmm1"),
    ("vcmpps", (k2.mask(k1), zmm0, bcst(rsi), 14), {}, "vcmpgtps k2{k1}, zmm0, [rsi]{1to16}"),
    ("vpcmpd", (k1, zmm0, zmm1, 1), {}, "vpcmpltd k1, zmm0, zmm1"),
    ("vpcmpud", (k1, zmm0, zmm1, 6), {}, "vpcmpnleud k1, zmm0, zmm1"),
    ("vpcmpeqd", (k1, zmm0, zmm1), {}, "vpcmpeqd k1, zmm0, zmm1"),
    ("vpcmpgtd", (k1, zmm0, zmm1), {}, "vpcmpgtd k1, zmm0, zmm1"),
    ("vptestmd", (k1, zmm0, zmm0), {}, "vptestmd k1, zmm0, zmm0"),
    ("vptestnmd", (k1, zmm0, zmm0), {}, "vptestnmd k1, zmm0, zmm0"),
    ("vblendmps", (zmm0.mask(k1), zmm1, zmm2), {}, "vblendmps zmm0{k1}, zmm1, zmm2"),
    ("vpblendmd", (zmm0.mask(k1), zmm1, zmm2), {}, "vpblendmd zmm0{k1}, zmm1, zmm2"),
    ("vcvtps2dq", (zmm0, zmm1), {}, "vcvtps2dq zmm0, zmm1"),
    ("vcvtps2dq", (zmm0, zmm1), {"rc": "rd"}, "vcvtps2dq zmm0{rd-sae}, zmm1"),
    ("vcvttps2dq", (zmm0, zmm1), {}, "vcvttps2dq zmm0, zmm1"),
    ("vcvtdq2ps", (zmm0, zmm1), {}, "vcvtdq2ps zmm0, zmm1"),
    ("vcvtudq2ps", (zmm0, zmm1), {}, "vcvtudq2ps zmm0, zmm1"),
    ("vcvtps2udq", (zmm0, zmm1), {}, "vcvtps2udq zmm0, zmm1"),
    ("vcvttps2udq", (zmm0, zmm1), {}, "vcvttps2udq zmm0, zmm1"),
    ("vcvtps2ph", (ymm0, zmm1, 4), {}, "vcvtps2ph ymm0, zmm1, 4"),
    ("vcvtps2ph", ((rdi + 32).mask(k1), zmm1, 4), {}, "vcvtps2ph [rdi+0x20]{k1}, zmm1, 4"),
    ("vcvtph2ps", (zmm0, ymm1), {}, "vcvtph2ps zmm0, ymm1"),
    ("vcvtph2ps", (zmm0.mask(k1).z, rsi + 32), {}, "vcvtph2ps zmm0{k1}{z}, [rsi+0x20]"),
    ("vcvtneps2bf16", (ymm0, zmm1), {}, "vcvtneps2bf16 ymm0, zmm1"),
    ("vcvtneps2bf16", (ymm0, bcst(rsi)), {}, "vcvtneps2bf16 ymm0, [rsi]{1to16}"),
    ("vpmovdb", (xmm0, zmm1), {}, "vpmovdb xmm0, zmm1"),
    ("vpmovdb", ((rdi + 16).mask(k1), zmm1), {}, "vpmovdb [rdi+0x10]{k1}, zmm1"),
    ("vpmovsdb", (xmm0, zmm1), {}, "vpmovsdb xmm0, zmm1"),
    ("vpmovusdb", (xmm0, zmm1), {}, "vpmovusdb xmm0, zmm1"),
    ("vpmovdw", (ymm0, zmm1), {}, "vpmovdw ymm0, zmm1"),
    ("vpmovsdw", (ymm0, zmm1), {}, "vpmovsdw ymm0, zmm1"),
    ("vpmovusdw", (rdi + 32, zmm1), {}, "vpmovusdw [rdi+0x20], zmm1"),
    ("vpmovzxbd", (zmm0, xmm1), {}, "vpmovzxbd zmm0, xmm1"),
    ("vpmovzxbd", (zmm0.mask(k1).z, rsi + 16), {}, "vpmovzxbd zmm0{k1}{z}, [rsi+0x10]"),
    ("vpmovsxbd", (zmm0, rsi + 0), {}, "vpmovsxbd zmm0, [rsi]"),
    ("vpmovzxwd", (zmm0, ymm1), {}, "vpmovzxwd zmm0, ymm1"),
    ("vpmovsxwd", (zmm0, rsi + 0), {}, "vpmovsxwd zmm0, [rsi]"),
    ("vpslld", (zmm0, zmm1, 23), {}, "vpslld zmm0, zmm1, 0x17"),
    ("vpsrld", (zmm0, zmm1, 16), {}, "vpsrld zmm0, zmm1, 0x10"),
    ("vpsrad", (zmm0, zmm1, 31), {}, "vpsrad zmm0, zmm1, 0x1f"),
    ("vpsllvd", (zmm0, zmm1, zmm2), {}, "vpsllvd zmm0, zmm1, zmm2"),
    ("vpsrlvd", (zmm0, zmm1, zmm2), {}, "vpsrlvd zmm0, zmm1, zmm2"),
    ("vpaddd", (zmm0, zmm1, bcst(rsi)), {}, "vpaddd zmm0, zmm1, [rsi]{1to16}"),
    ("vpsubd", (zmm0, zmm1, zmm2), {}, "vpsubd zmm0, zmm1, zmm2"),
    ("vpmulld", (zmm0, zmm1, zmm2), {}, "vpmulld zmm0, zmm1, zmm2"),
    ("vpminsd", (zmm0, zmm1, zmm2), {}, "vpminsd zmm0, zmm1, zmm2"),
    ("vpmaxsd", (zmm0, zmm1, zmm2), {}, "vpmaxsd zmm0, zmm1, zmm2"),
    ("vpunpcklbw", (zmm0, zmm1, zmm2), {}, "vpunpcklbw zmm0, zmm1, zmm2"),
    ("vpunpckhbw", (zmm0, zmm1, zmm2), {}, "vpunpckhbw zmm0, zmm1, zmm2"),
    ("vpunpcklwd", (zmm0, zmm1, zmm2), {}, "vpunpcklwd zmm0, zmm1, zmm2"),
    ("vpunpckhwd", (zmm0, zmm1, zmm2), {}, "vpunpckhwd zmm0, zmm1, zmm2"),
    ("vpminud", (zmm0, zmm1, zmm2), {}, "vpminud zmm0, zmm1, zmm2"),
    ("vpmaxud", (zmm0, zmm1, zmm2), {}, "vpmaxud zmm0, zmm1, zmm2"),
    ("vpabsd", (zmm0, zmm1), {}, "vpabsd zmm0, zmm1"),
    ("vpmaxub", (zmm0, zmm1, zmm2), {}, "vpmaxub zmm0, zmm1, zmm2"),
    ("vpmaxsb", (zmm0, zmm1, zmm2), {}, "vpmaxsb zmm0, zmm1, zmm2"),
    ("vpshufb", (zmm0, zmm1, zmm2), {}, "vpshufb zmm0, zmm1, zmm2"),
    ("vpermps", (zmm0, zmm1, zmm2), {}, "vpermps zmm0, zmm1, zmm2"),
    ("vpermd", (zmm0, zmm1, zmm2), {}, "vpermd zmm0, zmm1, zmm2"),
    ("vpermilps", (zmm0, zmm1, 0xB1), {}, "vpermilps zmm0, zmm1, 0xb1"),
    ("vpermilps", (zmm0, zmm1, zmm2), {}, "vpermilps zmm0, zmm1, zmm2"),
    ("vshufps", (zmm0, zmm1, zmm2, 0x4E), {}, "vshufps zmm0, zmm1, zmm2, 0x4e"),
    ("vshuff32x4", (zmm0, zmm1, zmm2, 0x4E), {}, "vshuff32x4 zmm0, zmm1, zmm2, 0x4e"),
    ("vextractf32x4", (xmm0, zmm1, 3), {}, "vextractf32x4 xmm0, zmm1, 3"),
    ("vextractf32x8", (ymm0, zmm1, 1), {}, "vextractf32x8 ymm0, zmm1, 1"),
    ("vextractf128", (xmm0, ymm1, 1), {}, "vextractf128 xmm0, ymm1, 1"),
    ("vinsertf32x4", (zmm0, zmm1, xmm2, 2), {}, "vinsertf32x4 zmm0, zmm1, xmm2, 2"),
    ("vinsertf32x8", (zmm0, zmm1, ymm2, 1), {}, "vinsertf32x8 zmm0, zmm1, ymm2, 1"),
    ("vmovshdup", (xmm0, xmm1), {}, "vmovshdup xmm0, xmm1"),
    ("vmovhlps", (xmm0, xmm1, xmm2), {}, "vmovhlps xmm0, xmm1, xmm2"),
    ("vunpcklps", (zmm0, zmm1, zmm2), {}, "vunpcklps zmm0, zmm1, zmm2"),
    ("vunpckhps", (zmm0, zmm1, zmm2), {}, "vunpckhps zmm0, zmm1, zmm2"),
    ("kmovw", (k1, eax), {}, "kmovw k1, eax"),
    ("kmovw", (eax, k1), {}, "kmovw eax, k1"),
    ("kmovw", (k2, k1), {}, "kmovw k2, k1"),
    ("kmovd", (k1, eax), {}, "kmovd k1, eax"),
    ("kmovq", (k1, rax), {}, "kmovq k1, rax"),
    ("kandw", (k1, k2, k3), {}, "kandw k1, k2, k3"),
    ("kandnw", (k1, k2, k3), {}, "kandnw k1, k2, k3"),
    ("korw", (k1, k2, k3), {}, "korw k1, k2, k3"),
    ("kxorw", (k1, k2, k3), {}, "kxorw k1, k2, k3"),
    ("knotw", (k1, k2), {}, "knotw k1, k2"),
    ("kxnorw", (k1, k1, k1), {}, "kxnorw k1, k1, k1"),
    ("kortestw", (k1, k1), {}, "kortestw k1, k1"),
    ("ktestw", (k1, k2), {}, "ktestw k1, k2"),
    ("kshiftlw", (k1, k2, 3), {}, "kshiftlw k1, k2, 3"),
    ("kshiftrw", (k1, k2, 8), {}, "kshiftrw k1, k2, 8"),
    ("vzeroupper", (), {}, "vzeroupper"),
    ("cmovl", (rax, rcx), {}, "cmovl rax, rcx"),
    ("cmovg", (rax, qword[rsi + 8]), {}, "cmovg rax, [rsi+8]"),
    ("cmovb", (eax, ecx), {}, "cmovb eax, ecx"),
    ("cmova", (rax, rcx), {}, "cmova rax, rcx"),
    ("cmove", (rax, rcx), {}, "cmove rax, rcx"),
    ("cmovne", (rax, rcx), {}, "cmovne rax, rcx"),
    ("cmovle", (rax, rcx), {}, "cmovle rax, rcx"),
    ("cmovge", (rax, rcx), {}, "cmovge rax, rcx"),
    ("movsx", (eax, byte[rsi]), {}, "movsx eax, byte ptr [rsi]"),
    ("bzhi", (eax, eax, ecx), {}, "bzhi eax, eax, ecx"),
    ("shlx", (rax, rdx, rcx), {}, "shlx rax, rdx, rcx"),
    ("shrx", (eax, edx, ecx), {}, "shrx eax, edx, ecx"),
    ("sarx", (rax, rdx, rcx), {}, "sarx rax, rdx, rcx"),
    ("rdtsc", (), {}, "rdtsc"),
    ("pause", (), {}, "pause"),
    ("cmpxchg", (dword[rbx + 12], edx), {}, "cmpxchg [rbx+0xc], edx"),
    ("sfence", (), {}, "sfence"),
    ("lfence", (), {}, "lfence"),
    ("mfence", (), {}, "mfence"),
    ("prefetcht0", (byte[rsi + 256],), {}, "prefetcht0 [rsi+0x100]"),
    ("prefetcht1", (byte[rsi + 512],), {}, "prefetcht1 [rsi+0x200]"),
    ("prefetcht2", (byte[rsi + 1024],), {}, "prefetcht2 [rsi+0x400]"),
    ("prefetchnta", (byte[rsi + 4096],), {}, "prefetchnta [rsi+0x1000]"),
    ("vmovntps", (rdi + 64, zmm3), {}, "vmovntps [rdi+0x40], zmm3"),
    ("vmovntdq", (rdi + 0, zmm4), {}, "vmovntdq [rdi], zmm4"),
    ("vmovdqa32", (zmm0.mask(k1).z, rsi + 64), {}, "vmovdqa32 zmm0{k1}{z}, [rsi+0x40]"),
    ("vmovdqa64", (rdi + 0, zmm1), {}, "vmovdqa64 [rdi], zmm1"),
    ("vbroadcastf32x4", (zmm0, rsi + 16), {}, "vbroadcastf32x4 zmm0, [rsi+0x10]"),
    ("vbroadcastf32x8", (zmm0, rsi + 32), {}, "vbroadcastf32x8 zmm0, [rsi+0x20]"),
    ("vpbroadcastq", (zmm0, rax), {}, "vpbroadcastq zmm0, rax"),
    ("vfpclassps", (k1, zmm0, 0x81), {}, "vfpclassps k1, zmm0, 0x81"),
    ("vfpclassps", (k2.mask(k1), bcst(zword[rsi]), 0x18), {}, "vfpclassps k2{k1}, [rsi]{1to16}, 0x18"),
    ("vfpclassps", (k3, zword[rsi + 64], 0x18), {}, "vfpclassps k3, zmmword ptr [rsi+0x40], 0x18"),
    ("vpermt2ps", (zmm0, zmm1, zmm2), {}, "vpermt2ps zmm0, zmm1, zmm2"),
    ("vpermi2ps", (zmm0, zmm1, zmm2), {}, "vpermi2ps zmm0, zmm1, zmm2"),
    ("vpermt2d", (zmm0.mask(k1).z, zmm1, rsi + 0), {}, "vpermt2d zmm0{k1}{z}, zmm1, [rsi]"),
    ("vpmovwb", (ymm0, zmm1), {}, "vpmovwb ymm0, zmm1"),
    ("vpmovswb", ((rdi + 0).mask(k1), zmm1), {}, "vpmovswb [rdi]{k1}, zmm1"),
    ("vpmovuswb", (ymm0, zmm1), {}, "vpmovuswb ymm0, zmm1"),
    ("vpmovzxbw", (zmm0, ymm1), {}, "vpmovzxbw zmm0, ymm1"),
    ("vpmovsxbw", (zmm0, rsi + 0), {}, "vpmovsxbw zmm0, [rsi]"),
    ("vpsravd", (zmm0, zmm1, zmm2), {}, "vpsravd zmm0, zmm1, zmm2"),
    ("vpandq", (zmm0, zmm1, zmm2), {}, "vpandq zmm0, zmm1, zmm2"),
    ("vporq", (zmm0, zmm1, bcst(rsi)), {}, "vporq zmm0, zmm1, [rsi]{1to8}"),
    ("vpxorq", (zmm0, zmm1, zmm2), {}, "vpxorq zmm0, zmm1, zmm2"),
    ("vdpbf16ps", (zmm0, zmm1, zmm2), {}, "vdpbf16ps zmm0, zmm1, zmm2"),
    ("vdpbf16ps", (zmm3, zmm4, bcst(rsi + 8)), {}, "vdpbf16ps zmm3, zmm4, [rsi+8]{1to16}"),
    ("vpermt2w", (zmm0, zmm1, zmm2), {}, "vpermt2w zmm0, zmm1, zmm2"),
    ("vpdpbusd", (zmm0, zmm1, zmm2), {}, "vpdpbusd zmm0, zmm1, zmm2"),
    ("vpdpbusd", (zmm29, zmm30, rsi + 128), {}, "vpdpbusd zmm29, zmm30, [rsi+0x80]"),
    ("vpdpbusd", (zmm3.mask(k1).z, zmm4, bcst(rsi + 8)), {}, "vpdpbusd zmm3{k1}{z}, zmm4, [rsi+8]{1to16}"),
    ("vpdpbusds", (zmm5, zmm6, zmm7), {}, "vpdpbusds zmm5, zmm6, zmm7"),
]


@pytest.mark.parametrize(("mnemonic", "operands", "kwargs", "expected"), CASES, ids=[c[3] for c in CASES])
def test_roundtrip(mnemonic, operands, kwargs, expected):
    code = encode_one(mnemonic, operands, kwargs)
    assert iced_text(code) == [expected]


# conditional jumps (and their other spellings) to a label: (what we write, what iced decodes)
JUMPS = [
    ("ja", "ja"), ("jae", "jae"), ("jb", "jb"), ("jbe", "jbe"), ("je", "je"), ("jne", "jne"), ("jg", "jg"),
    ("jge", "jge"), ("jl", "jl"), ("jle", "jle"), ("js", "js"), ("jns", "jns"), ("jo", "jo"), ("jno", "jno"),
    ("jp", "jp"), ("jnp", "jnp"), ("jmp", "jmp"), ("call", "call"),
    ("jz", "je"), ("jnz", "jne"), ("jc", "jb"), ("jnc", "jae"), ("jnae", "jb"), ("jnb", "jae"), ("jna", "jbe"),
    ("jnbe", "ja"), ("jnge", "jl"), ("jnl", "jge"), ("jng", "jle"), ("jnle", "jg"), ("jpe", "jp"), ("jpo", "jnp"),
]  # fmt: skip


@pytest.mark.parametrize(("written", "decoded"), JUMPS)
def test_jumps_to_labels(written, decoded):
    a = Assembler()
    target = a.new_label("target")
    a.emit(written, target)
    a.nop()
    a.bind(target)
    a.ret()
    code = a.encode()
    texts = iced_text(code)
    assert texts[0].split(" ")[0] == decoded
    assert texts[1:] == ["nop", "ret"]
    instr = next(iter(Decoder(64, code)))
    assert instr.near_branch_target == len(code) - 1


def test_every_mnemonic_has_a_roundtrip_case():
    covered = {c[0] for c in CASES} | {written for written, _ in JUMPS}
    assert sorted(set(MNEMONICS) - covered) == []


def test_methods_match_emit():
    a, b = Assembler(), Assembler()
    a.vfmadd231ps(zmm1, zmm2, bcst(rsi + 4))
    a.and_(rax, 7)
    b.emit("vfmadd231ps", zmm1, zmm2, bcst(rsi + 4))
    b.emit("and", rax, 7)
    assert a.encode() == b.encode()


# vcmpps predicates: the pseudo-op names of the Intel SDM (imm8 0..31)
SDM_VCMPPS = (
    "vcmpeqps", "vcmpltps", "vcmpleps", "vcmpunordps", "vcmpneqps", "vcmpnltps",
    "vcmpnleps", "vcmpordps", "vcmpeq_uqps", "vcmpngeps", "vcmpngtps", "vcmpfalseps",
    "vcmpneq_oqps", "vcmpgeps", "vcmpgtps", "vcmptrueps", "vcmpeq_osps", "vcmplt_oqps",
    "vcmple_oqps", "vcmpunord_sps", "vcmpneq_usps", "vcmpnlt_uqps", "vcmpnle_uqps", "vcmpord_sps",
    "vcmpeq_usps", "vcmpnge_uqps", "vcmpngt_uqps", "vcmpfalse_osps", "vcmpneq_osps", "vcmpge_oqps",
    "vcmpgt_oqps", "vcmptrue_usps",
)  # fmt: skip


@pytest.mark.parametrize("name", list(CMP_PREDICATES))
def test_vcmpps_every_predicate(name):
    imm = CMP_PREDICATES[name]
    code = encode_one("vcmpps", (k3.mask(k2), zmm4, zmm25, imm), {})
    assert iced_text(code) == [f"{SDM_VCMPPS[imm]} k3{{k2}}, zmm4, zmm25"]


# disp8*N: EVEX scales an 8-bit displacement by the memory operand size (or the element size under broadcast)
@pytest.mark.parametrize(
    ("operands", "expected", "disp_bytes"),
    [
        ((zmm0, rsi + 64 * 127), "vmovups zmm0, [rsi+0x1fc0]", 1),
        ((zmm0, rsi - 64 * 128), "vmovups zmm0, [rsi-0x2000]", 1),
        ((zmm0, rsi + 64 * 128), "vmovups zmm0, [rsi+0x2000]", 4),
        ((zmm0, rsi + 68), "vmovups zmm0, [rsi+0x44]", 4),
        ((ymm16, rsi + 32 * 3), "vmovups ymm16, [rsi+0x60]", 1),
        ((xmm17, rsi + 16 * 5), "vmovups xmm17, [rsi+0x50]", 1),
    ],
)
def test_disp8_compression(operands, expected, disp_bytes):
    code = encode_one("vmovups", operands, {})
    instr = next(iter(Decoder(64, code)))
    assert iced_text(code) == [expected]
    # 4 bytes of EVEX prefix, the opcode and ModRM, then the displacement (iced reports disp32 as size 8 in 64-bit mode)
    assert len(code) == 6 + disp_bytes
    assert instr.memory_displ_size == {1: 1, 4: 8}[disp_bytes]


def test_disp8_compression_under_broadcast_uses_the_element_size():
    code = encode_one("vaddps", (zmm0, zmm1, bcst(rsi + 4 * 100)), {})
    assert iced_text(code) == ["vaddps zmm0, zmm1, [rsi+0x190]{1to16}"]
    assert len(code) == 7  # 4-byte EVEX prefix, opcode, ModRM, one displacement byte (100 * 4)


def test_memory_operand_spellings_are_equal():
    forms = [rsi + rcx * 4 + 8, rcx * 4 + rsi + 8, mem(rsi, rcx, 4, 8), [rsi + rcx * 4 + 8], (rsi + 16) + rcx * 4 - 8]
    texts = {iced_text(encode_one("vmovups", (zmm0, m), {}))[0] for m in forms}
    assert texts == {"vmovups zmm0, [rsi+rcx*4+8]"}


def test_shortest_encoding_is_chosen():
    # VEX for low xmm/ymm without decorations, EVEX as soon as a decoration or a high register needs it
    assert len(encode_one("vaddps", (ymm1, ymm2, ymm3), {})) == 4
    assert len(encode_one("vaddps", (ymm1, ymm2, ymm19), {})) == 6
    assert len(encode_one("add", (rax, 1), {})) == 4
    assert len(encode_one("add", (rax, 1000), {})) == 6  # the rax short form, imm32
    assert len(encode_one("mov", (rax, 5), {})) == 7
    assert len(encode_one("mov", (rax, 1 << 40), {})) == 10


def test_labels_backward_and_forward_jumps():
    a = Assembler()
    done = a.new_label("done")
    a.mov(ecx, 10)  # 0: 5 bytes
    loop = a.label("loop")
    a.dec(ecx)  # 5: 2 bytes
    a.jz(done)  # 7: 2 bytes
    a.jmp(loop)  # 9: 2 bytes
    a.bind(done)
    a.ret()  # 0xb
    assert iced_text(a.encode()) == ["mov ecx, 0xa", "dec ecx", "je 0xb", "jmp 5", "ret"]


def test_far_labels_get_near_branches():
    a = Assembler()
    far = a.new_label("far")
    top = a.label("top")
    a.jne(far)
    for _ in range(100):
        a.vaddps(zmm0, zmm0, zmm1)  # 6 bytes each: 600 bytes, out of rel8 range
    a.bind(far)
    a.jmp(top)
    code = a.encode(0x1000)
    decoded = list(Decoder(64, code, ip=0x1000))
    assert decoded[0].is_jcc_near and decoded[0].near_branch_target == decoded[-1].ip
    assert decoded[-1].is_jmp_near and decoded[-1].near_branch_target == 0x1000


def test_two_labels_on_one_instruction():
    a = Assembler()
    first, second = a.new_label("first"), a.new_label("second")
    a.jmp(first)
    a.jmp(second)
    a.bind(first)
    a.bind(second)
    a.ret()
    assert iced_text(a.encode()) == ["jmp 4", "jmp 4", "ret"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda a: a.mov(qword[rsi], rax + 0), "no encoding of `mov"),
        (lambda a: a.add(rsi + 0, 1), "ambiguous"),
        (lambda a: a.vaddps(zmm0, ymm1, zmm2), "no encoding of `vaddps"),
        (lambda a: a.vmovups(zmm0.mask(k0), rsi + 0), "k0 cannot be used"),
        (lambda a: a.vmovups((rdi + 0).mask(k1).z, zmm0), "zeroing-masking is not allowed"),
        (lambda a: a.vaddps(zmm0, zmm1.mask(k1), zmm2), "only the destination"),
        (lambda a: a.vaddps(zmm0, zmm1, rsi + 0, rc="rn"), "no encoding"),
        (lambda a: a.vaddps(zmm0, zmm1, zmm2, rc="nearest"), "unknown rounding"),
        (lambda a: a.vsqrtps(xmm0, xmm1.mask(k1)), "only the destination"),
        (lambda a: a.mov(rax, rsi + rsp * 2), "rsp cannot be an index"),
        (lambda a: a.lea(rax, rsi + rcx * 3), "scale must be one of"),
        (lambda a: a.shl(rax, 256), "no encoding"),
        (lambda a: a.mov(eax, byte[rsi]), "no encoding"),
        (lambda a: a.movzx(eax, dword[rsi]), "no encoding"),
    ],
)
def test_bad_operands_raise_codegen_error(build, message):
    with pytest.raises(CodegenError, match=message.replace("`", ".").replace("(", r"\(")):
        build(Assembler())


def test_unbound_and_twice_bound_labels_raise():
    a = Assembler()
    a.jmp(a.new_label("nowhere"))
    with pytest.raises(CodegenError, match="'nowhere', which is never bound"):
        a.encode()
    b = Assembler()
    lbl = b.label("twice")
    b.nop()
    with pytest.raises(CodegenError, match="bound twice"):
        b.bind(lbl)
    c = Assembler()
    c.nop()
    c.label("end")
    with pytest.raises(CodegenError, match="after the last instruction"):
        c.encode()


def test_size_hints_pick_the_operand_size():
    assert iced_text(encode_one("add", (dword[rsi + 4], 1), {})) == ["add dword ptr [rsi+4], 1"]
    assert iced_text(encode_one("add", (byte[rsi + 4], 1), {})) == ["add byte ptr [rsi+4], 1"]
    assert iced_text(encode_one("inc", (qword[rsp],), {})) == ["inc qword ptr [rsp]"]
