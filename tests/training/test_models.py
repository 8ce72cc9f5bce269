"""Tokenizer and tiny policy: round trips, special tokens, save/load through `load_policy`."""
import pytest
import torch

from pods.training.models import build_char_tokenizer, build_tiny_policy, load_policy, n_params


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def test_one_token_per_character_and_exact_round_trip(tokenizer):
    for text in ["4+7-8=", "11,3#3", "-12,-15#-15", "What is 3 + 4?\n"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)
        assert tokenizer.decode(ids) == text


def test_special_tokens_bos_prepended_and_left_padding(tokenizer):
    assert len({tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id}) == 4
    enc = tokenizer(["1+2=", "4+7-8="], padding=True)
    assert enc["input_ids"][1][0] == tokenizer.bos_token_id
    assert enc["input_ids"][0][:2] == [tokenizer.pad_token_id] * 2  # left padded
    assert enc["attention_mask"][0] == [0, 0, 1, 1, 1, 1, 1]
    ids = tokenizer("3#3", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id, tokenizer.pad_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "3#3"
    assert tokenizer("é", add_special_tokens=False)["input_ids"] == [tokenizer.unk_token_id]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_tiny_policy_is_seeded_and_survives_save_and_load(tmp_path, tokenizer, arch):
    model = build_tiny_policy(tokenizer, arch=arch, n_layer=2, d_model=32, n_head=2, seed=3)
    again = build_tiny_policy(tokenizer, arch=arch, n_layer=2, d_model=32, n_head=2, seed=3)
    other = build_tiny_policy(tokenizer, arch=arch, n_layer=2, d_model=32, n_head=2, seed=4)
    x = torch.tensor([tokenizer("4+7-8=11,3#3")["input_ids"]])
    assert torch.equal(model(x).logits, again(x).logits)
    assert not torch.equal(model(x).logits, other(x).logits)
    assert model.config.eos_token_id == tokenizer.eos_token_id and model.config.pad_token_id == tokenizer.pad_token_id
    # no dropout: two training-mode passes agree, so old/new log-probs match at ratio 1
    model.train()
    assert torch.equal(model(x).logits, model(x).logits)

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tok = load_policy(tmp_path)
    loaded.eval(), model.eval()
    assert torch.allclose(loaded(x).logits, model(x).logits)
    assert loaded_tok("4+7-8=")["input_ids"] == tokenizer("4+7-8=")["input_ids"]
    assert loaded_tok.padding_side == "left" and loaded_tok.pad_token_id == tokenizer.pad_token_id
    assert n_params(loaded) == n_params(model)


def test_bad_arguments_fail_clearly(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="unknown arch"):
        build_tiny_policy(tokenizer, arch="mamba")
    with pytest.raises(ValueError, match="divisible"):
        build_tiny_policy(tokenizer, d_model=30, n_head=4)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_policy(tmp_path / "nothing-here")


def test_fused_activation_is_the_same_function_in_one_kernel(tokenizer):
    """fuse_activations swaps GPT-2's eight-operation tanh GELU for torch's fused kernel: the logits and
    their gradients agree to float rounding, and a model without that activation is left alone."""
    import copy

    from transformers.activations import GELUTanh, NewGELUActivation

    from pods.training.models import fuse_activations

    model = build_tiny_policy(tokenizer, arch="gpt2", n_layer=2, d_model=32, n_head=2, seed=3)
    fused = copy.deepcopy(model)
    assert fuse_activations(fused) == 2 and fuse_activations(fused) == 0
    assert not any(isinstance(m, NewGELUActivation) for m in fused.modules())
    assert sum(isinstance(m, GELUTanh) for m in fused.modules()) == 2
    x = torch.tensor([tokenizer("4+7-8=11,3#3")["input_ids"]])
    out, out_fused = model(x).logits, fused(x).logits
    torch.testing.assert_close(out_fused, out, atol=1e-5, rtol=1e-5)
    out.square().sum().backward()
    out_fused.square().sum().backward()
    for p, q in zip(model.parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4)
    llama = build_tiny_policy(tokenizer, arch="llama", n_layer=2, d_model=32, n_head=2, seed=3)
    assert fuse_activations(llama) == 0  # SiLU is one kernel already
