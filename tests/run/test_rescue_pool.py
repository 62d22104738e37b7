"""The harnesses a weight step's rescue runs zero-signal tasks under: Fast-Slow's population, then the
scored archive best first, then files the program proposer writes once per incumbent, which the
search never sees."""

from __future__ import annotations

from tests.fixtures.rescue_domain import RescueDomain
from whale.core.config import load_config
from whale.harness.records import HarnessCandidate, Rollout
from whale.run.rescue_pool import rescue_pool
from whale.search.archive import Archive, CandidateEval
from whale.search.program import tried_on

FAILED = [Rollout("train-0", "c0000", "w0", s, answer="x #") for s in range(4)]


def archive_with_scores(tmp_path, domain: RescueDomain) -> Archive:
    archive = Archive(tmp_path / "search")
    seed = domain.seed_harness()
    for cid, status, mean in (("c0000", "seed", 0.1), ("c0001", "rejected", 0.2), ("c0002", "rejected", 0.5),
                              ("c0003", "invalid", None), ("c0004", "dropped", 0.3)):  # fmt: skip
        archive.add(HarnessCandidate(cid, seed.replace("Say", f"Say {cid}"), "c0000"), status=status)
        if mean is not None:
            archive.record_eval(CandidateEval(cid, "w0", {"t": mean}, mean, 10.0, 1.0, 0), [])
    return archive


def test_the_pool_is_the_population_then_the_scored_archive_best_first(tmp_path):
    domain = RescueDomain({"search": 2})
    archive = archive_with_scores(tmp_path, domain)
    cfg = load_config("tiny", overrides=["weights.rescue=distill", "weights.rescue_harnesses=3"])
    task = domain.splits()["search"][0]
    pool = rescue_pool(cfg, domain, archive, ["c0000"], task, "w0")
    assert [h.id for h in pool(FAILED)] == ["c0002", "c0004", "c0001"]
    fast_slow = rescue_pool(cfg, domain, archive, ["c0001", "c0004"], task, "w0")
    assert [h.id for h in fast_slow(FAILED)] == ["c0004", "c0002", "c0000"]
    assert len(archive.ids()) == 5  # nothing written: the archive had enough


def test_missing_harnesses_are_written_once_per_incumbent_and_hidden_from_the_search(tmp_path):
    domain = RescueDomain({"search": 2})
    archive = archive_with_scores(tmp_path, domain)
    cfg = load_config("tiny", overrides=["weights.rescue=distill", "weights.rescue_harnesses=6"])
    pool = rescue_pool(cfg, domain, archive, ["c0000"], domain.splits()["search"][0], "w0")
    first = [h.id for h in pool(FAILED)]
    written = [cid for cid in archive.ids() if archive.meta(cid)["status"] == "rescue"]
    assert first[:3] == ["c0002", "c0004", "c0001"] and first[3:] == written[:3] and len(written) == 3
    assert all(archive.meta(cid)["parent"] == "c0000" for cid in written)
    assert all("[rescue]" in archive.meta(cid)["hypothesis"] for cid in written)
    assert [h.id for h in pool(FAILED)] == first and len(archive.ids()) == 5 + 3  # reused, not rewritten
    assert not set(written) & set(archive.searched_ids())
    assert not set(written) & set(archive.fingerprints().values())
    assert tried_on(archive, "c0000") == set()  # the search may still try these mechanisms
