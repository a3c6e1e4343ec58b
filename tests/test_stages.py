import time

from ptxforge import stages


def test_stages_are_summed_inside_a_collection_and_free_outside():
    with stages.stage("lower"):   # no collection open: nothing recorded, no error
        pass
    with stages.collect() as times:
        for _ in range(3):
            with stages.stage("ptxas"):
                time.sleep(0.01)
        with stages.stage("lower"):
            with stages.stage("simplify"):
                time.sleep(0.01)
    assert set(times) == {"ptxas", "lower", "simplify"}
    assert times["ptxas"] >= 0.03
    assert times["lower"] >= times["simplify"] >= 0.01


def test_collections_nest_without_feeding_the_outer_one():
    with stages.collect() as outer:
        with stages.collect() as inner:
            with stages.stage("opt"):
                pass
        with stages.stage("ptx"):
            pass
    assert "opt" in inner and "opt" not in outer and "ptx" in outer


def test_merge_adds_per_stage():
    total = stages.merge({"lower": 1.0}, {"lower": 0.5, "ptxas": 2.0})
    assert total == {"lower": 1.5, "ptxas": 2.0}
