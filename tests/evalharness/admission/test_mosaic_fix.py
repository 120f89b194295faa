"""The search behind a Mosaic VMEM refusal's fix (the Mosaic compiles themselves are in
``test_chip_compile.py``, slow, with libtpu)."""

from evalharness.admission.mosaic_fix import MiB, _smaller_tiles, mosaic_vmem_need


def test_the_need_is_the_smallest_whole_mib_that_compiles():
    asked = []

    def compiles(limit):
        asked.append(limit)
        return limit >= 45 * MiB + 1  # a kernel that needs a little over 45 MiB

    assert mosaic_vmem_need(compiles, 32 * MiB, 96 * MiB) == 46 * MiB
    assert len(asked) <= 8  # a bisection, not a scan


def test_no_need_is_named_when_the_cap_is_not_enough():
    assert mosaic_vmem_need(lambda limit: False, 32 * MiB, 96 * MiB) is None


def test_smaller_tiles_halve_the_larger_tile_in_lane_multiples():
    assert _smaller_tiles((3328, 1536))[:4] == [(1664, 1536), (896, 1536), (896, 768), (512, 768)]
    assert _smaller_tiles((256, 128)) == [(128, 128)]
    assert all(q % 128 == 0 and kv % 128 == 0 for q, kv in _smaller_tiles((8192, 4096)))
