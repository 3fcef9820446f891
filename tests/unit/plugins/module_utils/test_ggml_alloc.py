"""ggml_alloc: ggml-alloc.c's graph allocator (b11434) replayed, and the MoE block it replays (issue 38).

The replay is held to real compute buffers in test_fit_plan_moe_grid.py (55 small models on one H100) and the
held-out loads; here: the allocator's own rules, and what any MoE block's peak must hold whatever its shape.
"""
from hypothesis import given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import ggml_alloc as ga

A = ga.ALIGNMENT


def test_best_fit_takes_the_smallest_free_block_besides_the_last_and_the_last_grows_the_buffer():
    d = ga._DynAllocator()
    a, b, c, e = (d.alloc(n * A) for n in (4, 1, 2, 1))
    assert (a, b, c, e) == (0, 4 * A, 5 * A, 7 * A) and d.max_size == 8 * A
    d.release(a, 4 * A)
    d.release(c, 2 * A)                      # holes of 4 and 2 blocks below the last
    assert d.alloc(2 * A) == c               # the smaller hole that fits
    assert d.alloc(3 * A) == a               # the 4-block hole
    assert d.alloc(5 * A) == 8 * A and d.max_size == 13 * A       # nothing fits: the last block grows the buffer


def test_freed_neighbours_merge_into_one_block():
    d = ga._DynAllocator()
    a, b, c, _ = (d.alloc(2 * A) for _ in range(4))
    for off in (a, c, b):
        d.release(off, 2 * A)
    assert d.free[0] == [0, 6 * A] and d.alloc(6 * A) == 0 and d.max_size == 8 * A


def _chain(inplace):
    x = ga._Tensor(4 * A, is_input=True)
    y = ga._Tensor(4 * A, [x], inplace)
    z = ga._Tensor(4 * A, [y], inplace)
    return [x, y, z]


def test_an_in_place_op_reuses_its_only_parent_else_both_live():
    assert ga.replay(_chain(True)) == 4 * A
    assert ga.replay(_chain(False)) == 8 * A


def test_a_dependency_node_keeps_its_sources_alive_until_it_is_reached():
    def graph(dep):
        x = ga._Tensor(4 * A, is_input=True)
        y = ga._Tensor(4 * A, [x])               # x's last child: x is freed after y
        nodes = [x, y, ga._Tensor(4 * A, [y])]
        if dep:
            nodes.append(ga._Dep(0, [x]))       # ... unless a dependency after the third node holds it
        return nodes
    assert ga.replay(graph(False)) == 8 * A and ga.replay(graph(True)) == 12 * A


SHAPES = dict(n_embd=st.sampled_from([512, 1024, 2048, 2560, 3072, 4096, 7168]),
              n_ff_exp=st.sampled_from([128, 256, 512, 768, 1280, 1536, 2048, 2880]),
              n_used=st.integers(1, 16), n_expert=st.sampled_from([8, 16, 64, 128, 256]),
              heads=st.sampled_from([(16, 4, 128), (32, 4, 128), (16, 2, 256), (64, 8, 128)]),
              ub=st.sampled_from([64, 512, 1024, 2048]))


@settings(max_examples=60, deadline=None)
@given(**SHAPES)
def test_any_moe_blocks_peak_holds_what_must_be_alive_at_once(n_embd, n_ff_exp, n_used, n_expert, heads, ub):
    n_head, n_head_kv, head_dim = heads
    args = (n_embd, n_ff_exp, n_used, n_expert, n_head * head_dim, n_head_kv * head_dim, n_head_kv * head_dim, ub)
    fused, plain = ga.moe_block_peak(*args, fused=True), ga.moe_block_peak(*args, fused=False)
    e, f = 4 * n_used * n_embd * ub, 4 * n_used * n_ff_exp * ub
    assert plain >= 3 * f                   # up, gate and their GLU output
    assert plain >= f + e                   # the GLU output under the down projection's experts' outputs
    assert fused >= 2 * e                   # the experts' outputs and their weighted copy (ggml-cuda's fusion)
    assert fused >= plain                   # the fused kernels' dependencies only keep tensors longer
    assert ga.moe_block_peak(*args, fused=True) == fused        # cached, the same answer
