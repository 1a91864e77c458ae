"""Where a process stands in its job: torchrun's variables, read by one typed reader."""

from qwen3_trn_helpers.training.ranks import rank_place

#: what torchrun sets in rank 5 of a job of 2 nodes x 4 ranks (torch 2.14,
#: torch/distributed/elastic/agent/server/local_elastic_agent.py: _start_workers)
RANK_5_OF_8 = {
    "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
}  # fmt: skip


def test_a_launched_rank_reads_its_place_typed():
    place = rank_place(RANK_5_OF_8)
    assert place.launched
    assert (place.rank, place.local_rank, place.node) == (5, 1, 1)
    assert (place.world_size, place.local_world_size, place.nodes) == (8, 4, 2)
    assert place.torchrun_world == (4, 2)  # (ranks per node, nodes), as a plan takes them


def test_a_process_torchrun_did_not_start_is_rank_0_of_one():
    place = rank_place({})
    assert not place.launched and place.torchrun_world is None
    assert (place.rank, place.local_rank, place.world_size, place.local_world_size) == (0, 0, 1, 1)


def test_ranks_per_node_default_to_the_world():
    """A launcher that sets no LOCAL_WORLD_SIZE (one node): every rank is on this node."""
    place = rank_place({"RANK": "1", "WORLD_SIZE": "2"})
    assert place.launched and place.local_world_size == 2 and place.torchrun_world == (2, 1)
