"""The generated CUDA texts stay byte-identical to those the prebuilt cubins were verified
with on the GPU (CPU-only: headers recorded from main at 827e50f, before the kernel
constants were derived from golden/storage.py; source digests those of the cubins of the
engine with NestedFP's and razer-g128's early weight copies (docs/gpu.md note 16) and of
the rewritten E4M3 quantizer, run on an H100 on 2026-11-27; the engine's comments were edited
after that run, and the SASS of every engine kernel is identical to the cubins that ran; the CUDA-core/ReSET source
with the quantizer's dequantized output for the tensor-core W4A4 path ran on an H100 on
2026-11-27, later). A change here needs a new GPU run."""
import hashlib

import pytest

from mactile.gpu import formats
from mactile.gpu.prebuilt import _jobs, digest

HEADERS = {'engine_traits_header': '1c3f57a9fefcc49bb921226bed09ae1bd556c792d1b2e59bd429c03c228ae687',
 'fp4_decode_header': '6b34f9f970f24e0132ba98fd990606bc99a06ea62188f08a67dbc7a2aeb93990',
 'fp4_encode_header': '848594df75e22534ca621cc22bf3bf7c6f3ee96cff1b299cbf6918d411aac629',
 'prelude': '1112ddf9c967cd8b1c988fd60f8a0a9781d77c272afd0b05151624a33fd50aeb',
 'reset_header': 'fda2acc9fd2c1e565bbd10009220ea1cd69449663c2cd734d65f87fd751b0747',
 'traits_header': '067c10b8a73bf1606b534b5efb9070f3240d4d6a5b5c6a46dd4432422a137bbc'}
SOURCES = ['31b726a7dd2274ba282d',
           '46ab454ff995cd96690c',
           '88b314e1ab01a5183ba8',
           '9639fbdee2400b53103a',
           'a87e9b1bb459fe527255',
           'abace61a6f2383093859']
KERNEL_FORMATS = {'mxfp4': [-1, 32, 'uint8', 255, 0, 'e8m0', 0, 127, False,
           [1178878528, 1481657416, 977026624, 674247736], 0, 1.7014118346046923e+38, False],
 'nvfp4': [0, 16, 'uint8', 127, 0, 'fp8_e4m3', 3, 7, False,
           [1178878528, 1481657416, 977026624, 674247736], 0, 448.0, True],
 'razer': [1, 16, 'uint8', 63, 6, 'e3m3', 3, 3, True,
           [1178878528, 1481657416, 977026624, 674247736], 539779156, 30.0, True],
 'razer-g128': [2, 128, 'uint16', 16383, 14, 'fp16', 10, 15, True,
                [1178878528, 1481657416, 977026624, 674247736], 539779156, 1.9990234375,
                True]}


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_generated_header_unchanged(name):
    assert hashlib.sha256(getattr(formats, name)().encode()).hexdigest() == HEADERS[name]


def test_prebuilt_sources_unchanged():
    assert sorted({digest(j[0]) for j in _jobs()}) == SOURCES


@pytest.mark.parametrize("name", sorted(KERNEL_FORMATS))
def test_kernel_format_constants_unchanged(name):
    kf = formats.kernel_format(formats.golden_proto(name))
    got = [kf.fmt_id, kf.block, str(kf.scale_dtype), kf.scale_mask, kf.meta_shift,
           kf.scale_format.name, kf.scale_man_bits, kf.scale_bias, kf.has_special,
           list(kf.lut), kf.specials_word, kf.scale_max, kf.tensor_scale]
    assert got == KERNEL_FORMATS[name]
