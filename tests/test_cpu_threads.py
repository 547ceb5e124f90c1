"""The busy-cores note `fit` prints on the CPU (repo_common/cpu_threads.py)."""

from repo_common.cpu_threads import busy_cores_warning


def test_the_note_appears_only_when_several_threads_meet_busy_cores():
    note = busy_cores_warning(2, load=3.9, cores=2)
    assert "load 3.9 on 2 cores" in note and "OMP_NUM_THREADS=1" in note and "\n" not in note
    assert busy_cores_warning(2, load=0.3, cores=2) is None  # free cores: threads help
    assert busy_cores_warning(1, load=8.0, cores=2) is None  # one thread already
    assert busy_cores_warning(4, load=3.0, cores=4) is None  # below one job per core
