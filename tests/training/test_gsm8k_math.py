"""GSM8K / MATH / MATH-500 / AMC23 from local copies laid out like the hub repositories."""
import json

import pandas as pd
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from pods.training.tasks import get_task
from pods.training.tasks.gsm8k import GSM8K
from pods.training.tasks.math import AMC23, MATH_SUBSETS, Math500, MathTrain, load_split
from pods.training.tasks.rewards import SYSTEM_PROMPT

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

GSM8K_TRAIN = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
                 "clips in May. How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 "
               "clips altogether in April and May.\n#### 72"},
    {"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of "
                 "babysitting. How much did she earn?",
     "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned "
               "0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"},
    {"question": "A company pays 1,000 workers $1.2 each. " + "Then it repeats. " * 200 + "Total?",
     "answer": "1,000 * 1.2 = 1,200\n#### 1,200"},
]
GSM8K_TEST = [
    {"question": "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and "
                 "bakes muffins for her friends every day with four. She sells the remainder at the "
                 "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make "
                 "every day at the farmers' market?",
     "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = "
               "$<<9*2=18>>18 every day at the farmer's market.\n#### 18"},
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A word-level tokenizer with a ChatML template, saved like a hub tokenizer folder."""
    words = set(" ".join(r["question"] for r in GSM8K_TRAIN + GSM8K_TEST).split()) | set(SYSTEM_PROMPT.split())
    vocab = {w: i for i, w in enumerate(["[UNK]", "<|im_start|>", "<|im_end|>", *sorted(words)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    fast.chat_template = CHATML
    folder = tmp_path_factory.mktemp("tokenizer")
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    # openai/gsm8k: main/{train,test}-00000-of-00001.parquet
    (root / "gsm8k" / "main").mkdir(parents=True)
    pd.DataFrame(GSM8K_TRAIN).to_parquet(root / "gsm8k/main/train-00000-of-00001.parquet")
    pd.DataFrame(GSM8K_TEST).to_parquet(root / "gsm8k/main/test-00000-of-00001.parquet")
    # EleutherAI/hendrycks_math: <subset>/train-00000-of-00001.parquet with problem/solution/level/type
    for k, subset in enumerate(MATH_SUBSETS):
        (root / "math" / subset).mkdir(parents=True)
        rows = [
            {"problem": f"What is ${k} + \\frac{{1}}{{2}}$?", "level": "Level 1", "type": subset,
             "solution": f"We add: ${k} + \\frac{{1}}{{2}} = \\boxed{{\\frac{{{2 * k + 1}}}{{2}}}}$."},
            {"problem": f"Find $x$ if $x^2 = {k * k}$ and $x \\ge 0$.", "level": "Level 2", "type": subset,
             "solution": f"Taking roots, $\\boxed{{x = {k}}}$ is wrong form; the answer is $\\boxed{{{k}}}$."},
        ]
        pd.DataFrame(rows).to_parquet(root / f"math/{subset}/train-00000-of-00001.parquet")
    # HuggingFaceH4/MATH-500: test.jsonl
    (root / "math500").mkdir()
    with open(root / "math500/test.jsonl", "w") as f:
        for i, (problem, answer) in enumerate([
            ("Convert the point $(0,3)$ to polar coordinates.", "\\left( 3, \\frac{\\pi}{2} \\right)"),
            ("What is $\\frac{3}{6}$ in lowest terms?", "\\frac{1}{2}"),
        ]):
            f.write(json.dumps({"problem": problem, "solution": "...", "answer": answer, "subject": "Algebra",
                                "level": 2, "unique_id": f"test/algebra/{i}.json"}) + "\n")
    # zwhe99/amc23: test.jsonl, answers stored as floats
    (root / "amc23").mkdir()
    with open(root / "amc23/test.jsonl", "w") as f:
        f.write(json.dumps({"id": 0, "question": "Cities $A$ and $B$ are $45$ miles apart ... ?",
                            "answer": 27.0, "url": "https://artofproblemsolving.com/"}) + "\n")
    return root


def test_gsm8k_gold_prompt_and_reward(data, tokenizer):
    task = GSM8K(source=str(data / "gsm8k"))
    train = task.train_problems(seed=0)
    assert sorted(p.answer for p in train) == ["10", "1200", "72"]  # commas removed
    (eggs,) = task.test_problems()
    assert eggs.answer == "18"
    tok = PreTrainedTokenizerFast.from_pretrained(tokenizer)
    prompt = task.render_prompt(eggs, tok)
    assert prompt.startswith("<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\nJanet")
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    right = "<think>\n16 - 3 - 4 = 9, 9 * 2 = 18\n</think>\n<answer>\n$18\n</answer>"
    wrong = right.replace("18", "26")
    assert task.reward(right, eggs) == 1.0 and task.is_correct(right, eggs)
    assert task.reward(wrong, eggs) == pytest.approx(0.2) and not task.is_correct(wrong, eggs)


def test_seeded_train_order_and_test_size(data):
    task = GSM8K(source=str(data / "gsm8k"))
    orders = {tuple(p.answer for p in task.train_problems(seed)) for seed in range(6)}
    assert len(orders) > 1  # the seed shuffles
    assert task.train_problems(3) == task.train_problems(3)
    assert len(GSM8K(source=str(data / "gsm8k"), test_size=1).test_problems()) == 1


def test_long_prompts_are_filtered_like_the_paper(data, tokenizer):
    tok = PreTrainedTokenizerFast.from_pretrained(tokenizer)
    long_q = GSM8K_TRAIN[2]["question"]
    # 512 tokens: the 200-sentence question is over the limit, the others are not
    task = GSM8K(source=str(data / "gsm8k"), filter_tokenizer=str(tokenizer), max_prompt_tokens=512)
    kept = task.train_problems(0)
    assert len(kept) == 2 and all(p.question != long_q for p in kept)
    lengths = [len(tok(task.render_prompt(p, tok), add_special_tokens=False)["input_ids"]) for p in kept]
    assert max(lengths) <= 512
    # a limit just under the shortest prompt drops everything, proving the count is in tokens
    tight = GSM8K(source=str(data / "gsm8k"), filter_tokenizer=str(tokenizer), max_prompt_tokens=min(lengths) - 1)
    assert tight.train_problems(0) == []


def test_math_train_all_subsets_last_boxed(data):
    task = MathTrain(source=str(data / "math"), test_source=str(data / "math500"))
    train = task.train_problems(0)
    assert len(train) == 2 * len(MATH_SUBSETS)
    by_q = {p.question: p for p in train}
    assert by_q["What is $3 + \\frac{1}{2}$?"].answer == "\\frac{7}{2}"  # nested braces
    assert by_q["Find $x$ if $x^2 = 9$ and $x \\ge 0$."].answer == "3"  # the last box, not the first
    assert {p.meta["type"] for p in train} == set(MATH_SUBSETS)
    # MATH runs are evaluated on MATH-500 with the binary (MATH-NF) reward
    assert [p.answer for p in task.test_problems()] == ["\\left( 3, \\frac{\\pi}{2} \\right)", "\\frac{1}{2}"]
    assert task.reward("<think>\n3/6\n</think>\n<answer>\n$0.5$\n</answer>", task.test_problems()[1]) == 1.0
    assert task.reward("<think>\n3/6\n</think>\n<answer>\n$0.6$\n</answer>", task.test_problems()[1]) == 0.0


def test_eval_sets(data):
    m500 = Math500(source=str(data / "math500"))
    assert len(m500.test_problems()) == 2 and m500.test_problems()[0].meta["source"] == "test/algebra/0.json"
    amc = AMC23(source=str(data / "amc23"))
    (p,) = amc.test_problems()
    assert p.answer == "27"  # stored as 27.0
    with pytest.raises(ValueError, match="evaluation set"):
        amc.train_problems(0)


def test_registry_and_bad_input(data):
    task = get_task("gsm8k", source=str(data / "gsm8k"), reward="llama", metric="both_acc")
    assert isinstance(task, GSM8K) and task.reward_name == "llama"
    for name in ("math", "math500", "amc23"):
        assert get_task(name).name == name  # nothing is loaded until problems are asked for
    with pytest.raises(ValueError, match="does not exist"):
        GSM8K(source=str(data / "missing")).train_problems(0)
    with pytest.raises(ValueError, match="reward 'gsm8"):
        GSM8K(reward="gsm8")
    with pytest.raises(ValueError, match="no train"):
        load_split(str(data / "math500"), None, "train")
    no_template = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    task = GSM8K(source=str(data / "gsm8k"))
    with pytest.raises(ValueError, match="chat template"):
        task.render_prompt(task.test_problems()[0], no_template)


def test_hub_id_offline_gives_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ValueError, match="local copy"):
        load_split("no-such-org/no-such-dataset", None, "test")


def test_a_single_file_needs_its_test_split_named_and_splits_never_overlap(data, tmp_path):
    train = data / "gsm8k/main/train-00000-of-00001.parquet"
    test = data / "gsm8k/main/test-00000-of-00001.parquet"
    with pytest.raises(ValueError, match=r"task 'gsm8k': source .*train-00000-of-00001.parquet is one file, but the "
                                         r"task reads a train and a test split; give the test split's file as "
                                         r"test_source"):
        GSM8K(source=str(train))
    task = GSM8K(source=str(train), test_source=str(test))
    assert len(task.train_problems(0)) == 3 and [p.answer for p in task.test_problems()] == ["18"]
    with pytest.raises(ValueError,
                       match=r"task 'gsm8k': 3 training problem\(s\) are also test questions .*must not overlap"):
        GSM8K(source=str(train), test_source=str(train)).train_problems(0)
    flat = tmp_path / "flat"
    flat.mkdir()
    pd.DataFrame(GSM8K_TRAIN).to_json(flat / "gsm8k.jsonl", orient="records", lines=True)
    with pytest.raises(ValueError, match=r"no train\*.parquet/.jsonl/.json/.csv file for split 'train'"):
        GSM8K(source=str(flat)).train_problems(0)
    assert get_task("gsm8k", source=str(train), test_source=str(test)).test_problems()[0].answer == "18"


@pytest.mark.parametrize("layout", ["file", "flat_folder", "subset_folders"])
def test_a_math_subset_is_read_once_whatever_the_layout(data, tmp_path, layout):
    rows = pd.concat([pd.read_parquet(f) for f in sorted((data / "math").rglob("*.parquet"))])
    if layout == "file":
        source = tmp_path / "math_train.jsonl"
        rows.to_json(source, orient="records", lines=True)
    elif layout == "flat_folder":
        source = tmp_path / "math"
        source.mkdir()
        rows.to_parquet(source / "train-00000-of-00001.parquet")
    else:
        source = data / "math"
    train = MathTrain(source=str(source), test_source=str(data / "math500")).train_problems(0)
    assert len(train) == len(rows) == 2 * len(MATH_SUBSETS)
    assert len({p.question for p in train}) == len(train)


def test_hub_tasks_name_the_datasets_a_workflow_fetches():
    from pods.training.tasks import task_class

    assert task_class("gsm8k_llama").hub_datasets({}) == {"source": "openai/gsm8k"}
    assert task_class("math").hub_datasets({}) == {"source": "EleutherAI/hendrycks_math",
                                                   "test_source": "HuggingFaceH4/MATH-500"}
    assert task_class("math").hub_datasets({"source": "/data/math"}) == {"test_source": "HuggingFaceH4/MATH-500"}
    assert task_class("arith").hub_datasets({}) == {}
