"""The host-side benchmark runs the run's own encode and measure functions and prints ns/pixel."""

from evalharness.bench.host_side import main, synthetic_frames


def test_the_benchmark_prints_each_part_beside_the_stated_rate(capsys):
    main(["resolution.frames=5", "resolution.height=64", "resolution.width=96", "warm_runs=2"])
    out = capsys.readouterr().out
    for part in ("| encode |", "| measure |", "| side_by_side |"):
        assert part in out
    row = next(line for line in out.splitlines() if line.startswith("| measure |"))
    median, low, high, stated = (float(c.replace(",", "")) for c in row.strip("|").split("|")[1:])
    assert 0 < low <= median <= high and stated > 0
    assert "5 x 64 x 96, 2 rounds" in out and "Machine: " in out


def test_synthetic_frames_are_a_smooth_uint8_video():
    frames = synthetic_frames(4, 32, 48, seed=0)
    assert frames.shape == (4, 32, 48, 3) and frames.dtype.name == "uint8"
    assert 20 < frames.std() < 80  # texture, neither flat nor saturated
