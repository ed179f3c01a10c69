"""SnapshotFiles: the offset-named snapshot files shared by the producer state and delayed records."""

from __future__ import annotations

from pathlib import Path

from dmq.storage.snapshot_files import SnapshotFiles


def test_a_write_keeps_the_newest_two_and_the_one_just_written(tmp_path: Path) -> None:
    files = SnapshotFiles(str(tmp_path), ".snap")
    for offset in (10, 20, 30):
        files.write(offset, f"at {offset}".encode())
    assert files.offsets() == [20, 30]
    files.write(5, b"older")  # below the newest two: kept beside them, never deleted by its own write
    assert files.offsets() == [5, 20, 30]
    assert files.read(5) == b"older"
    files.write(40, b"newest")
    assert files.offsets() == [30, 40]


def test_leftovers_and_foreign_names_are_not_snapshots(tmp_path: Path) -> None:
    files = SnapshotFiles(str(tmp_path), ".snap")
    files.write(7, b"x")
    (tmp_path / f"{8:020d}.snap.tmp").write_bytes(b"half written")
    (tmp_path / "notanumber.snap").write_bytes(b"?")
    (tmp_path / f"{9:020d}.log").write_bytes(b"segment")
    assert files.offsets() == [7]
    assert files.path(7) == str(tmp_path / f"{7:020d}.snap")


def test_newest_first_and_delete_after(tmp_path: Path) -> None:
    files = SnapshotFiles(str(tmp_path), ".snap", keep=4)
    for offset in (1, 2, 3, 4):
        files.write(offset, b"s", fsync=False)
    assert list(files.newest_first(3)) == [3, 2, 1]
    files.delete_after(2)
    assert files.offsets() == [1, 2]
    files.delete(1)
    files.delete(1)  # already gone: no error
    assert files.offsets() == [2]


def test_snapshots_at_segment_bases_are_kept_while_their_segments_exist_when_asked(tmp_path: Path) -> None:
    """The producer state keeps its snapshot at every segment's base (an unclean restart
    rebuilds from the base of the segment holding the recovery point); the delayed
    records' snapshots (whole copies of the pending set) keep only the newest two."""
    for name in ("00000000000000000000.log", f"{10:020d}.log", f"{20:020d}.log"):
        (tmp_path / name).write_bytes(b"segment")
    kept = SnapshotFiles(str(tmp_path), ".snapshot", keep_segment_bases=True)
    plain = SnapshotFiles(str(tmp_path), ".delayed")
    for offset in (10, 15, 20, 25, 30):
        kept.write(offset, b"x")
        plain.write(offset, b"x")
    assert kept.offsets() == [10, 20, 25, 30]
    assert plain.offsets() == [25, 30]
    (tmp_path / f"{10:020d}.log").unlink()  # retention deleted that segment
    kept.write(35, b"x")
    assert kept.offsets() == [20, 30, 35]
    kept.sync(25, 35)
    kept.sync(90, 99)  # none there: only the directory
