"""The vLLM rollout engine's own code, run against a stand-in `vllm` module (no GPU here).

What this covers: the request it builds (token prompts, SamplingParams from the trainer's
values, the LoRA request of the current adapter), the conversion of vLLM's outputs to
`Rollouts` (EOS kept, nothing after it, padding and masks), weight pushes after an update (full
fine-tuning) and adapter versions (LoRA), sleep/wake around generation, the missing-package
error. What it does not cover: vLLM itself (sampling, memory, CUDA graphs, that `load_weights`
accepts the Hugging Face parameter names of every architecture); benchmarks/gpu_smoke.sh runs
the real engine on a CUDA machine.
"""
import sys
import types
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from transformers import Qwen2Config, Qwen2ForCausalLM

from pods.config import TrainConfig
from pods.rollout import make_rollout_engine

EOS, PAD = 2, 0


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class FakeLoRARequest:
    def __init__(self, name, lora_int_id, lora_path):
        self.lora_name, self.lora_int_id, self.lora_path = name, lora_int_id, lora_path


class FakeLLM:
    """Records what the engine asks for; each completion i of a prompt is i + 1 tokens then EOS
    (the last one never stops), tokens derived from the prompt so rows are distinguishable."""

    instances = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []
        self.loaded = {}
        model = SimpleNamespace(load_weights=lambda weights: self.loaded.update({k: v.clone() for k, v in weights}))
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model)))
        )
        FakeLLM.instances.append(self)

    def generate(self, prompts, params, lora_request=None, use_tqdm=True):
        self.calls.append(("generate", prompts, params, lora_request))
        outputs = []
        for prompt in prompts:
            first = prompt["prompt_token_ids"][-1] + 10
            completions = []
            for i in range(params.n):
                ids = [first + i] * (i + 1) + [EOS, 7, 7]  # vLLM never emits past EOS; be strict anyway
                if i == params.n - 1:
                    ids = [first] * (params.max_tokens + 3)  # ran into the length cap
                completions.append(SimpleNamespace(token_ids=ids))
            outputs.append(SimpleNamespace(outputs=completions))
        return outputs

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self):
        self.calls.append(("wake_up",))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = FakeLLM, FakeSamplingParams
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    vllm.lora, lora.request = lora, request
    for name, module in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, module)
    FakeLLM.instances.clear()
    return vllm


def tiny_model():
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64))


def config(**extra):
    cfg = TrainConfig(base_model="Qwen/Qwen2.5-3B-Instruct", rollout_engine="hf", seed=3, max_new_tokens=6)
    for key, value in extra.items():
        setattr(cfg, key, value)
    return cfg


TOKENIZER = SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS)


def build(model, **extra):
    from pods.rollout.vllm import VLLMRolloutEngine

    return VLLMRolloutEngine(model=model, tokenizer=TOKENIZER, config=config(**extra))


def test_without_vllm_one_clear_error(monkeypatch):
    import pods.rollout.vllm as module  # importing needs no vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ValueError, match="needs the vllm package"):
        module.VLLMRolloutEngine(model=tiny_model(), tokenizer=TOKENIZER, config=config())


def test_requests_and_rollouts(fake_vllm):
    engine = build(tiny_model(), vllm_gpu_memory_utilization=0.4)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["model"] == "Qwen/Qwen2.5-3B-Instruct" and llm.kwargs["gpu_memory_utilization"] == 0.4
    assert llm.kwargs["seed"] == 3 and llm.kwargs["enable_sleep_mode"] and "enable_lora" not in llm.kwargs
    rollouts = engine.generate([[5, 6, 7], [9]], n=3, temperature=0.9, max_new_tokens=6, seed=11)
    _, prompts, params, lora = [c for c in llm.calls if c[0] == "generate"][-1]
    assert prompts == [{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [9]}]
    assert (params.n, params.temperature, params.max_tokens, params.seed) == (3, 0.9, 6, 11)
    assert params.stop_token_ids == [EOS] and lora is None
    assert rollouts.group.tolist() == [0, 0, 0, 1, 1, 1] and rollouts.n == 3
    assert rollouts.completion_ids.shape == (6, 6)
    assert rollouts.completion_ids[0].tolist() == [17, EOS, PAD, PAD, PAD, PAD]  # EOS kept, then padding
    assert rollouts.completion_ids[4].tolist() == [20, 20, EOS, PAD, PAD, PAD]
    assert rollouts.completion_ids[2].tolist() == [17] * 6  # truncated at max_new_tokens, no EOS
    assert rollouts.lengths.tolist() == [2, 3, 6, 2, 3, 6]
    greedy = engine.generate([[5]], n=1, temperature=0.9, max_new_tokens=6, greedy=True)
    assert [c for c in llm.calls if c[0] == "generate"][-1][2].temperature == 0.0 and len(greedy) == 1


def test_sleep_wake_and_full_weight_push(fake_vllm):
    model = tiny_model()
    engine = build(model)
    llm = FakeLLM.instances[-1]
    assert set(llm.loaded) == set(model.state_dict())  # initial push, Hugging Face names
    engine.generate([[5]], n=2, temperature=1.0, max_new_tokens=4)
    assert llm.calls[-1] == ("sleep", 1)  # memory back to the update
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(1.0)  # an "update"
    engine.sync_weights(model)
    names = [c[0] for c in llm.calls]
    assert names[-2:] == ["wake_up", "reset_prefix_cache"]
    assert torch.equal(llm.loaded["model.embed_tokens.weight"], model.model.embed_tokens.weight)
    engine.generate([[5]], n=2, temperature=1.0, max_new_tokens=4)
    assert [c[0] for c in llm.calls].count("wake_up") == 1  # already awake: no second wake


def test_lora_adapter_versions(fake_vllm):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    engine = build(model, vllm_sleep=True)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_lora"] and llm.kwargs["max_lora_rank"] == 4
    assert "enable_sleep_mode" not in llm.kwargs and not llm.loaded  # the base stays; no weight push
    engine.generate([[5]], n=2, temperature=1.0, max_new_tokens=4)
    first = llm.calls[-1][3]
    assert first.lora_int_id == 1
    saved = load_file(f"{first.lora_path}/adapter_model.safetensors")
    assert saved and all("lora_" in k for k in saved)
    engine.sync_weights(model)
    engine.generate([[5]], n=2, temperature=1.0, max_new_tokens=4)
    second = llm.calls[-1][3]
    assert second.lora_int_id == 2 and second.lora_path != first.lora_path
    assert ("sleep", 1) not in llm.calls


def test_registry_and_options(fake_vllm):
    from pods.rollout.vllm import VLLMOptions

    engine = make_rollout_engine("vllm", model=tiny_model(), tokenizer=TOKENIZER, config=config())
    assert type(engine).__name__ == "VLLMRolloutEngine"
    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization"):
        VLLMOptions.from_config(config(vllm_gpu_memory_utilization=1.5))
