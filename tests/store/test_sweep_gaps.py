"""Runs that are not there are said (posexp/store/sweep_gaps.py): a sweep's deleted job dirs and
dangling links, which a listing of the dirs that are there cannot show."""

from __future__ import annotations

import yaml

from posexp.store.sweep_gaps import dangling_links, gaps, sweep_size


def sweep(root, task, jobs, params=None):
    root.mkdir(parents=True)
    hydra = {"overrides": {"task": task}, "sweeper": {"params": params}}
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    for job in jobs:
        (root / job).mkdir()
        (root / job / "results.json").write_text('{"status": "completed"}')
    return root


def test_a_sweep_with_a_deleted_job_dir_and_a_dangling_link_says_both(tmp_path):
    # Read "3 runs: 3 completed" for a sweep of four jobs, one deleted; a link was not named.
    root = sweep(tmp_path / "s", ["pe=rope,alibi", "heads=2,4", "model=tiny"], ["a", "b", "c"])
    (root / "gone").symlink_to(tmp_path / "nowhere")
    assert sweep_size(root) == 4
    assert dangling_links(root) == [root / "gone"]
    link, missing = gaps(root)
    assert link.startswith(f"{root / 'gone'}: a link to ") and "does not exist" in link
    assert missing == (
        f"{root}: 1 of the sweep's 4 jobs have no run dir (deleted, or not started yet): not listed"
    )
    assert gaps(tmp_path) == [link, missing]  # found from the folder above too


def test_a_whole_sweep_says_nothing_and_the_sweepers_params_count(tmp_path):
    root = sweep(tmp_path / "s", ["model=tiny"], ["a", "b", "c"], params={"seed": "0,1,2"})
    assert sweep_size(root) == 3 and gaps(root) == []
    (root / "multirun.yaml").write_text("not: [hydra")
    assert sweep_size(root) is None and gaps(root) == []  # unknown size: no guess
