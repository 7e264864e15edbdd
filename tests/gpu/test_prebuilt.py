"""``prebuilt.build``: chunk files are reused only for the same source and the same kernel
names, and a rebuild with another name list leaves no chunk that its table does not name
(CPU-only; needs the local nvcc)."""
import json
import shutil

import pytest

from mactile.gpu import prebuilt

SRC = """
template <int N> __global__ void k(int* p) { p[threadIdx.x] = N; }
"""


def _names(*ns):
    return [f"k<{n}>" for n in ns]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_rebuild_with_other_names_recompiles_and_drops_stale_chunks(tmp_path):
    dg = prebuilt.digest(SRC)
    first = prebuilt.build([(SRC, _names(1, 2, 3))], tmp_path, chunk=2)
    assert len(first) == 2 and all(p.exists() for p in first)
    again = prebuilt.build([(SRC, _names(1, 2, 3))], tmp_path, chunk=2)
    assert again == first  # same names: the same files, reused
    # another name list in the same number of chunks: new files, every name in the table
    second = prebuilt.build([(SRC, _names(1, 2, 4))], tmp_path, chunk=2)
    table = json.loads((tmp_path / f"{dg}.json").read_text())
    assert sorted(table) == sorted(prebuilt._norm(n) for n in _names(1, 2, 4))
    assert {p.name for p in tmp_path.glob(f"{dg}-*.cubin")} == {p.name for p in second}
    assert first[0] == second[0] and first[1] != second[1]  # k<1>, k<2> reused; k<3> chunk gone
    assert not first[1].exists()
    assert all(v[0] in {p.name for p in second} for v in table.values())
