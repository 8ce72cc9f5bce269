"""The hf rollout engine against transformers' own generate, and the update batch it feeds."""

import copy

import pytest
import torch

from pods.training.config import TrainConfig
from pods.training.models import build_char_tokenizer, build_tiny_policy
from pods.training.rollout import make_rollout_engine
from pods.training.rollout.base import encode_prompts
from pods.training.rollout.hf import HFRolloutEngine
from pods.training.update import UpdateBatch
from pods.training.update.torch_engine import token_logprobs

torch.set_num_threads(1)
TEXTS = ["1+2+3=", "4+5=", "7+8+9+1-3=", "0="]  # different lengths: left padding matters


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request, tok):
    return build_tiny_policy(tok, arch=request.param, n_layer=2, d_model=64, n_head=2, seed=1)


class Ids:
    """A tokenizer stand-in with a chosen EOS, to make rows stop early in an untrained model."""

    def __init__(self, pad, eos):
        self.pad_token_id, self.eos_token_id = pad, eos


def hf_greedy(model, prompt, eos, max_new_tokens):
    out = model.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=0,
    )[0, len(prompt):].tolist()
    return out[: out.index(eos) + 1] if eos in out else out


@pytest.mark.parametrize("chunk", [1, 3, 8])  # kv_cache_chunk: transformers' DynamicCache, then ChunkedCache
def test_greedy_equals_transformers_generate(model, tok, chunk):
    prompts = encode_prompts(tok, TEXTS)
    engine = HFRolloutEngine(model=model, tokenizer=tok, config=TrainConfig(kv_cache_chunk=chunk))
    got = engine.generate(prompts, 3, temperature=1.0, max_new_tokens=12, greedy=True)
    assert got.completion_ids.shape[0] == len(TEXTS) * 3
    assert got.group.tolist() == [g for g in range(len(TEXTS)) for _ in range(3)]
    for row in range(len(got)):
        mine = got.completion_ids[row][got.completion_mask[row].bool()].tolist()
        assert mine == hf_greedy(model, prompts[row // 3], tok.eos_token_id, 12)


@pytest.mark.parametrize("chunk", [1, 8])
def test_eos_stops_rows_and_pads_after(model, tok, chunk):
    prompts = encode_prompts(tok, TEXTS)
    # choose as "EOS" a token the greedy continuations produce early, so rows end at different times
    free = HFRolloutEngine(model=model, tokenizer=tok).generate(prompts, 1, temperature=1.0, max_new_tokens=12,
                                                                greedy=True)
    eos = int(free.completion_ids[0, 2])
    engine = HFRolloutEngine(model=model, tokenizer=Ids(tok.pad_token_id, eos),
                             config=TrainConfig(kv_cache_chunk=chunk))
    got = engine.generate(prompts, 2, temperature=1.0, max_new_tokens=12, greedy=True)
    lengths = got.lengths.tolist()
    assert min(lengths) <= 3 and got.completion_ids.shape[1] == max(lengths)
    for row in range(len(got)):
        L = lengths[row]
        expected = hf_greedy(model, prompts[row // 2], eos, 12)
        assert got.completion_ids[row, :L].tolist() == expected
        assert got.completion_mask[row, :L].all() and not got.completion_mask[row, L:].any()
        assert (got.completion_ids[row, L:] == tok.pad_token_id).all()


def test_prompt_is_prefilled_once_then_one_token_per_call(model, tok):
    prompts = encode_prompts(tok, TEXTS)
    shapes = []
    hook = model.register_forward_pre_hook(lambda mod, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        HFRolloutEngine(model=model, tokenizer=tok).generate(prompts, 8, temperature=1.0, max_new_tokens=5)
    finally:
        hook.remove()
    width = max(map(len, prompts))
    assert shapes[0] == (len(TEXTS), width)  # G rows, not G * n
    assert all(s[1] == 1 for s in shapes[1:]) and len(shapes) <= 5


@pytest.mark.parametrize("sampling", ["inverse_cdf", "multinomial"])
def test_sampling_follows_the_tempered_distribution(model, tok, sampling):
    prompt = encode_prompts(tok, ["3+4="])
    temperature = 0.7
    with torch.no_grad():
        logits = model(torch.tensor(prompt)).logits[0, -1].float()
    expected = torch.softmax(logits / temperature, -1)
    n = 4000
    torch.manual_seed(0)
    got = HFRolloutEngine(model=model, tokenizer=tok, config=TrainConfig(sampling=sampling)).generate(
        prompt, n, temperature=temperature, max_new_tokens=1)
    freq = torch.bincount(got.completion_ids[:, 0], minlength=len(expected)).double() / n
    top = expected.argsort(descending=True)[:5]
    # binomial standard error; 5 sigma
    assert ((freq[top] - expected[top]).abs() <= 5 * (expected[top] * (1 - expected[top]) / n).sqrt() + 1e-3).all()


def test_seed_gives_private_reproducible_stream(model, tok):
    prompts = encode_prompts(tok, TEXTS)
    engine = HFRolloutEngine(model=model, tokenizer=tok)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    a = engine.generate(prompts, 4, temperature=1.0, max_new_tokens=8, seed=11)
    assert torch.equal(torch.get_rng_state(), before)
    b = engine.generate(prompts, 4, temperature=1.0, max_new_tokens=8, seed=11)
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_update_batch_logprobs_match_unpadded_rows_and_micro_batches(model, tok):
    prompts = encode_prompts(tok, TEXTS)
    torch.manual_seed(0)
    rollouts = make_rollout_engine("hf", model=model, tokenizer=tok, config=None).generate(
        prompts, 4, temperature=1.0, max_new_tokens=10
    )
    rows = torch.tensor([1, 3, 6, 9, 12, 15])
    batch = UpdateBatch.from_rollouts(rollouts, rows, tok.pad_token_id)
    assert len(batch) == 6 and batch.num_tokens == int(rollouts.completion_mask[rows].sum())
    with torch.no_grad():
        full = token_logprobs(model, batch)
        for i, r in enumerate(rows.tolist()):
            L = int(rollouts.lengths[r])
            ids = prompts[r // 4] + rollouts.completion_ids[r, :L].tolist()
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
            alone = logp[len(prompts[r // 4]) - 1 : len(ids) - 1].gather(-1,
                                                                         torch.tensor(ids[len(prompts[r // 4]):])[:,
                                                                                                                  None])
            torch.testing.assert_close(full[i, :L], alone.squeeze(-1), atol=1e-5, rtol=1e-5)
            assert (full[i, L:] == 0).all()
        for start in range(0, 6, 2):
            part = batch.slice(start, start + 2)
            assert part.input_ids.shape[1] <= batch.input_ids.shape[1]
            torch.testing.assert_close(token_logprobs(model, part), full[start:start + 2, : part.completion_len],
                                       atol=1e-5, rtol=1e-5)
            assert not full[start:start + 2, part.completion_len:].any()


def test_evaluation_shards_add_up_to_the_single_process_result(model, tok):
    from pods.training.evaluation import EvalSet, evaluate

    class Task:  # any deterministic verdict that varies between items will do
        def is_correct(self, completion, problem):
            return (sum(map(ord, completion)) + problem) % 3 == 0

    eval_set = EvalSet("test", list(range(23)), encode_prompts(tok, [f"{i}+{2 * i}=" for i in range(23)]))
    engine = HFRolloutEngine(model=model, tokenizer=tok)
    whole = evaluate(engine, Task(), tok, eval_set, max_new_tokens=4, batch_size=5)
    counts = []
    for rank in range(3):  # 23 items over 3 processes: 8, 8, 7 (+1 uncounted repeat)
        evaluate(engine, Task(), tok, eval_set, max_new_tokens=4, batch_size=5, rank=rank, world_size=3,
                 reduce=lambda values: counts.append(values) or values)
    correct, tokens, total = (sum(c[i] for c in counts) for i in range(3))
    assert total == 23 and 0 < whole["accuracy"] < 1
    assert correct / total == whole["accuracy"] and tokens / total == whole["mean_length"]


def test_shared_prompt_pass_equals_row_by_row_in_value_and_gradient(model, tok):
    prompts = encode_prompts(tok, TEXTS)
    torch.manual_seed(1)
    rollouts = HFRolloutEngine(model=model, tokenizer=tok).generate(prompts, 6, temperature=1.0, max_new_tokens=10)
    batch = UpdateBatch.from_rollouts(rollouts, torch.tensor([0, 2, 3, 5, 6, 7, 9, 11, 12, 13, 20, 23]),
                                      tok.pad_token_id)
    weights = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(2))
    results = []
    for share in (False, True):
        model.zero_grad()
        logprobs = token_logprobs(model, batch, share_prompts=share)
        (logprobs * weights).sum().backward()
        results.append((logprobs.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])))
    model.zero_grad()
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[1][1], results[0][1], atol=1e-5, rtol=1e-4)


# --- hf_static: the static cache and the fixed-shape decode step give hf's greedy tokens ----------
def static_engine(model, tokenizer, compile=False):
    from pods.training.rollout.hf_static import StaticHFRolloutEngine

    return StaticHFRolloutEngine(model=model, tokenizer=tokenizer, compile=compile)


@pytest.fixture(scope="module")
def lively(model):
    """The tiny model with large random weights: its greedy continuations vary from prompt to prompt and
    from position to position (the initial weights' all repeat one token), so a wrong cache position shows."""
    lively = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in lively.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * (0.3 if p.dim() > 1 else 1.0))
    return lively


@pytest.mark.parametrize("attention", ["sdpa", "eager"])  # eager: attn_implementation's choice on a CPU
def test_static_engine_greedy_equals_hf_engine(lively, tok, attention):
    model, prompts = copy.deepcopy(lively), encode_prompts(tok, TEXTS)
    model.set_attn_implementation(attention)
    free = HFRolloutEngine(model=model, tokenizer=tok).generate(prompts, 1, temperature=1.0, max_new_tokens=12,
                                                                greedy=True)
    candidates = sorted(set(free.completion_ids.flatten().tolist()))
    assert len(candidates) >= 2  # continuations that differ
    uneven = False
    for eos in [tok.eos_token_id, *candidates]:  # emitted tokens as "EOS" stop rows at different steps
        ids = Ids(tok.pad_token_id, eos)
        want = HFRolloutEngine(model=model, tokenizer=ids).generate(prompts, 3, temperature=1.0, max_new_tokens=12,
                                                                    greedy=True)
        engine = static_engine(model, ids)
        for _ in range(2):  # the second call reuses the engine's cache, emptied
            got = engine.generate(prompts, 3, temperature=1.0, max_new_tokens=12, greedy=True)
            assert torch.equal(got.completion_ids, want.completion_ids), eos
            assert torch.equal(got.completion_mask, want.completion_mask) and got.group.tolist() == want.group.tolist()
        uneven |= min(want.lengths.tolist()) < max(want.lengths.tolist())
    assert uneven


def test_static_engine_samples_the_tempered_distribution(model, tok):
    prompt = encode_prompts(tok, ["3+4="])
    with torch.no_grad():
        logits = model(torch.tensor(prompt)).logits
    torch.manual_seed(0)
    got = static_engine(model, Ids(tok.pad_token_id, -1)).generate(prompt, 2000, temperature=0.7, max_new_tokens=2)
    first = got.completion_ids[:, 0]
    expected = torch.softmax(logits[0, len(prompt[0]) - 1].float() / 0.7, -1)
    freq = torch.bincount(first, minlength=len(expected)).double() / len(first)
    top = expected.argsort(descending=True)[:5]
    sd = (expected[top] * (1 - expected[top]) / len(first)).sqrt()
    assert ((freq[top] - expected[top]).abs() <= 5 * sd + 1e-3).all()
    # the second token of the rows that drew the most frequent first token follows the model given that token
    token = int(top[0])
    rows = first == token
    with torch.no_grad():
        after = model(torch.tensor([prompt[0] + [token]])).logits[0, -1].float()
    expected2 = torch.softmax(after / 0.7, -1)
    freq2 = torch.bincount(got.completion_ids[rows, 1], minlength=len(expected2)).double() / int(rows.sum())
    top2 = expected2.argsort(descending=True)[:3]
    n2 = int(rows.sum())
    sd2 = (expected2[top2] * (1 - expected2[top2]) / n2).sqrt()
    assert ((freq2[top2] - expected2[top2]).abs() <= 5 * sd2 + 1e-3).all()


@pytest.mark.slow
def test_compiled_static_engine_greedy_equals_hf_engine(lively, tok):
    model, prompts = lively, encode_prompts(tok, TEXTS)
    want = HFRolloutEngine(model=model, tokenizer=tok).generate(prompts, 4, temperature=1.0, max_new_tokens=10,
                                                                greedy=True)
    got = static_engine(model, tok, compile=True).generate(prompts, 4, temperature=1.0, max_new_tokens=10, greedy=True)
    assert torch.equal(got.completion_ids, want.completion_ids) and torch.equal(got.completion_mask,
                                                                                want.completion_mask)


def test_update_batch_take_trims_like_slice_and_keeps_the_rows_order(model, tok):
    prompts = encode_prompts(tok, TEXTS)
    torch.manual_seed(0)
    rollouts = make_rollout_engine("hf", model=model, tokenizer=tok, config=None).generate(
        prompts, 4, temperature=1.0, max_new_tokens=10
    )
    batch = UpdateBatch.from_rollouts(rollouts, torch.arange(len(rollouts)), tok.pad_token_id)
    rows = torch.tensor([9, 2, 13])
    part, by_rows = batch.take(rows), batch.take(slice(2, 5))
    for got, index in ((part, rows), (by_rows, torch.arange(2, 5))):
        T = got.completion_len
        assert T == int(batch.completion_mask[index].sum(dim=0).nonzero().max()) + 1
        torch.testing.assert_close(got.completion_mask, batch.completion_mask[index, :T])
        prompt_width = max(len(prompts[int(r) // 4]) for r in index)  # no column that is padding in every row
        assert got.input_ids.shape[1] == prompt_width + T
        assert torch.equal(got.attention_mask.sum(dim=1), batch.attention_mask[index].sum(dim=1))
    with torch.no_grad():
        full = token_logprobs(model, batch)
        torch.testing.assert_close(token_logprobs(model, part), full[rows, : part.completion_len], atol=1e-5, rtol=1e-5)


def test_inverse_cdf_never_draws_a_token_of_zero_probability_and_is_seeded():
    from pods.training.rollout.hf import choose

    logits = torch.tensor([[0.0, -float("inf"), 2.0, -float("inf"), 1.0]]).repeat(20000, 1)
    draw = lambda seed: choose(logits, greedy=False, temperature=1.0, sampling="inverse_cdf",  # noqa: E731
                               generator=torch.Generator().manual_seed(seed))
    tokens = draw(0)
    counts = torch.bincount(tokens, minlength=5)
    assert counts[1] == counts[3] == 0
    expected = torch.softmax(logits[0], -1)
    assert ((counts.double() / len(tokens) - expected).abs() <= 5 * (expected * (1 - expected) / len(tokens)).sqrt()
            + 1e-3).all()
    assert torch.equal(draw(0), tokens) and not torch.equal(draw(1), tokens)


@pytest.mark.parametrize("chunk", [3, 8])
def test_the_chunked_cache_samples_the_tokens_of_the_concatenating_one(model, tok, chunk):
    """Same seed, same tokens: attention over the chunk's masked tail adds exact zeros."""
    prompts = encode_prompts(tok, TEXTS)
    made = [HFRolloutEngine(model=model, tokenizer=tok, config=TrainConfig(kv_cache_chunk=c)).generate(
        prompts, 6, temperature=1.0, max_new_tokens=12, seed=7) for c in (1, chunk)]
    assert torch.equal(made[0].completion_ids, made[1].completion_ids)


# --- attn_implementation: eager attention, the CPU default, computes what sdpa does ---------------
@pytest.fixture(scope="module")
def eager(model):
    twin = copy.deepcopy(model)
    twin.set_attn_implementation("eager")
    assert twin.config._attn_implementation == "eager" and model.config._attn_implementation == "sdpa"
    return twin


def test_eager_attention_decodes_generate_greedy_and_the_sdpa_samples(model, eager, tok):
    """Over the chunked cache's masked tail and left padding: greedy tokens equal transformers' generate,
    and the same seed samples sdpa's tokens (the two differ in the last bits only)."""
    prompts = encode_prompts(tok, TEXTS)
    engine = HFRolloutEngine(model=eager, tokenizer=tok, config=TrainConfig(kv_cache_chunk=8))
    got = engine.generate(prompts, 2, temperature=1.0, max_new_tokens=12, greedy=True)
    for row in range(len(got)):
        assert got.completion_ids[row][got.completion_mask[row].bool()].tolist() == hf_greedy(
            model, prompts[row // 2], tok.eos_token_id, 12)
    made = [HFRolloutEngine(model=m, tokenizer=tok, config=TrainConfig(kv_cache_chunk=8)).generate(
        prompts, 6, temperature=1.0, max_new_tokens=12, seed=7) for m in (model, eager)]
    assert torch.equal(made[0].completion_ids, made[1].completion_ids)


def test_eager_attention_gives_the_update_sdpas_logprobs_and_gradients(model, eager, tok):
    prompts = encode_prompts(tok, TEXTS)
    torch.manual_seed(1)
    rollouts = HFRolloutEngine(model=model, tokenizer=tok).generate(prompts, 6, temperature=1.0, max_new_tokens=10)
    batch = UpdateBatch.from_rollouts(rollouts, torch.arange(len(rollouts)), tok.pad_token_id)
    weights = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(2))
    results = []
    for policy in (model, eager):
        policy.zero_grad()
        logprobs = token_logprobs(policy, batch)  # the shared-prompt pass, through the cache
        (logprobs * weights).sum().backward()
        results.append((logprobs.detach(), torch.cat([p.grad.flatten() for p in policy.parameters()])))
        policy.zero_grad()
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[1][1], results[0][1], atol=1e-5, rtol=1e-4)
