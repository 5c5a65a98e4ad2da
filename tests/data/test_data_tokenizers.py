"""Tokenizers and chat templates against transformers on small tokenizers trained in the test."""

import json
import os

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from maxnorm_jax.data import (
  SAMPLE_FILES,
  ChatFormat,
  HFTokenizer,
  PlainFormat,
  build_pipeline,
  compile_chat_template,
  load_chat_template,
  load_records,
  load_tokenizer,
  make_format,
  render_chat,
)

transformers = pytest.importorskip("transformers")

CORPUS = [
  "what is 12+7? the answer is 19.",
  "print the sum of two integers read from stdin",
  "natalia sold clips to 48 of her friends in april",
  "you are a helpful assistant. think step by step.",
  "system user assistant tool",
  "def main(): print(sum(map(int, input().split())))",
] * 20

# A Qwen-style template using what transformers provides: namespace, loop controls, tojson,
# raise_exception, eos_token, strftime_now, add_generation_prompt.
QWEN_STYLE = (
  "{%- set ns = namespace(sys=false) -%}"
  "{%- for m in messages -%}"
  "{%- if m['role'] not in ['system', 'user', 'assistant'] -%}"
  "{{ raise_exception('unknown role ' + m['role']) }}"
  "{%- endif -%}"
  "{%- if m['role'] == 'system' %}{% set ns.sys = true %}{% endif -%}"
  "{%- endfor -%}"
  "{%- if not ns.sys %}<|im_start|>system\nYou are helpful. Year {{ strftime_now('%Y') }}.<|im_end|>\n{% endif -%}"
  "{%- for m in messages %}"
  "{%- if loop.index0 > 5 %}{% break %}{% endif %}"
  "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
  "{%- if m.meta is defined %} {{ m.meta | tojson }}{% endif %}<|im_end|>\n"
  "{%- endfor %}"
  "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)
# A Llama-style template that writes bos_token itself, with trim_blocks/lstrip_blocks-sensitive layout.
LLAMA_STYLE = """{{ bos_token }}
{% for message in messages %}
    {% if message['role'] == 'user' %}
[INST] {{ message['content'] | trim }} [/INST]
    {% else %}
{{ message['content'] }}{{ eos_token }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}>>{% endif %}"""


def train_tokenizer(specials, bos=None):
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
  )
  tok.train_from_iterator(CORPUS, trainer)
  if bos is not None:
    tok.post_processor = processors.TemplateProcessing(
      single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
  return tok


def write_json(path, obj):
  with open(path, "w") as f:
    json.dump(obj, f)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("qwen")
  tok = train_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
  tok.save(str(d / "tokenizer.json"))
  write_json(
    d / "tokenizer_config.json",
    {
      "tokenizer_class": "PreTrainedTokenizerFast",
      "bos_token": None,
      "eos_token": "<|im_end|>",
      "pad_token": "<|endoftext|>",
      "chat_template": QWEN_STYLE,
      "model_max_length": 4096,
    },
  )
  write_json(d / "generation_config.json", {"eos_token_id": [2, 0], "pad_token_id": 0})
  write_json(d / "config.json", {"eos_token_id": 0, "bos_token_id": 0})
  return str(d)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("llama")
  tok = train_tokenizer(["<unk>", "<s>", "</s>"], bos="<s>")
  tok.save(str(d / "tokenizer.json"))
  write_json(
    d / "tokenizer_config.json",
    {
      "tokenizer_class": "PreTrainedTokenizerFast",
      "bos_token": {
        "__type": "AddedToken",
        "content": "<s>",
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
      },
      "eos_token": "</s>",
      "unk_token": "<unk>",
      "chat_template": [{"name": "default", "template": LLAMA_STYLE}, {"name": "tool_use", "template": "T"}],
    },
  )
  write_json(d / "generation_config.json", {"eos_token_id": 2, "bos_token_id": 1})
  return str(d)


def hf(path):
  return transformers.AutoTokenizer.from_pretrained(path)


CHATS = [
  [{"role": "user", "content": "what is 12+7?"}],
  [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "sum two ints"},
    {"role": "assistant", "content": "print(1)", "meta": {"score": 1, "note": "é<>&"}},
    {"role": "user", "content": "again"},
  ],
]


@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("gen", [True, False])
def test_qwen_style_template_matches_transformers(qwen_dir, chat, gen):
  ours, theirs = HFTokenizer.from_dir(qwen_dir), hf(qwen_dir)
  text = ours.apply_chat_template(CHATS[chat], add_generation_prompt=gen)
  assert text == theirs.apply_chat_template(CHATS[chat], tokenize=False, add_generation_prompt=gen)
  assert text.endswith("<|im_start|>assistant\n") == gen
  ids = ours.apply_chat_template(CHATS[chat], add_generation_prompt=gen, tokenize=True)
  assert ids == theirs.encode(text, add_special_tokens=False)
  assert ids.count(ours.tokenizer.token_to_id("<|im_start|>")) == (len(CHATS[chat]) + (chat == 0) + gen)


@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_llama_style_template_matches_transformers(llama_dir, chat):
  msgs = [m for m in CHATS[chat] if m["role"] != "system"]
  ours, theirs = HFTokenizer.from_dir(llama_dir), hf(llama_dir)
  text = ours.apply_chat_template(msgs)
  assert text == theirs.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  assert text.startswith("<s>") and text.endswith(">>")
  assert ours.encode("hello there", add_special_tokens=True) == theirs("hello there")["input_ids"]
  assert ours.encode("hello there", add_special_tokens=True)[0] == ours.bos_id == 1


def test_special_tokens_and_eos_ids(qwen_dir, llama_dir):
  q = HFTokenizer.from_dir(qwen_dir)
  assert q.special.tokens == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
  assert (q.eos_id, q.pad_id, q.bos_id) == (2, 0, 0)  # bos from config.json
  assert q.eos_ids == (2, 0)  # tokenizer eos, then generation_config's list, deduplicated
  assert q.vocab_size == hf(qwen_dir).vocab_size == len(hf(qwen_dir))
  lm = HFTokenizer.from_dir(llama_dir)
  assert lm.special.tokens == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
  assert (lm.bos_id, lm.eos_id, lm.pad_id, lm.eos_ids) == (1, 2, 2, (2,))  # pad falls back to eos
  assert lm.decode(lm.encode("print the sum", add_special_tokens=True)) == "print the sum"
  assert lm.decode_batch([lm.encode("april"), lm.encode("stdin")]) == ["april", "stdin"]


def test_chat_template_sources(tmp_path, llama_dir, qwen_dir):
  assert load_chat_template(llama_dir, "tool_use") == "T"
  with pytest.raises(KeyError, match="no template named 'nope'"):
    load_chat_template(llama_dir, "nope")
  # transformers 5 saves the template to chat_template.jinja; we read it back from there
  saved = tmp_path / "saved"
  hf(qwen_dir).save_pretrained(str(saved))
  assert os.path.exists(saved / "chat_template.jinja")
  assert HFTokenizer.from_dir(str(saved)).apply_chat_template(CHATS[1]) == hf(str(saved)).apply_chat_template(
    CHATS[1], tokenize=False, add_generation_prompt=True
  )
  assert load_tokenizer("char").vocab_size < 64
  with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
    load_tokenizer(str(tmp_path))


def test_template_globals_behave_like_transformers():
  with pytest.raises(Exception, match="unknown role tool") as ours:
    render_chat(QWEN_STYLE, [{"role": "tool", "content": "x"}])
  assert type(ours.value).__name__ == "TemplateError"
  assert render_chat("{{ x | tojson }}", [{"role": "user", "content": ""}], x={"a": "é<"}) == '{"a": "é<"}'
  assert render_chat("{{ x | tojson(indent=1) }}", [{"role": "user", "content": ""}], x=[1]) == "[\n 1\n]"
  t = "{% for m in messages %}{% if loop.index > 1 %}{% continue %}{% endif %}{{ m.content }}{% endfor %}"
  assert render_chat(t, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a"
  t = "{% generation %}{{ messages[0].content }}{% endgeneration %}|{{ dict(a=1)['a'] }}"
  assert render_chat(t, [{"role": "user", "content": "g"}]) == "g|1"
  with pytest.raises(Exception, match="underscore-prefixed"):
    render_chat("{% set ns = namespace(_x=1) %}", [{"role": "user", "content": ""}])
  with pytest.raises(Exception, match="unsafe|not safely|access"):
    render_chat(
      "{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}", [{"role": "user", "content": ""}]
    )
  with pytest.raises(ValueError, match="empty conversation"):
    render_chat("x", [])
  assert compile_chat_template("a") is compile_chat_template("a")


def test_chat_format_pipeline_matches_transformers(qwen_dir):
  tok, theirs = HFTokenizer.from_dir(qwen_dir), hf(qwen_dir)
  fmt = make_format({"kind": "chat", "system": "solve it", "user_template": "Q: {prompt}"})
  it = build_pipeline(
    SAMPLE_FILES["gsm8k"],
    tokenizer=tok,
    fields="gsm8k",
    prompt_format=fmt,
    batch_size=2,
    shard_index=0,
    shard_count=1,
    shuffle=False,
    num_epochs=1,
    max_prompt_len=400,
  )
  batch = next(it)
  rec = batch["records"][0]
  msgs = [{"role": "system", "content": "solve it"}, {"role": "user", "content": "Q: " + rec["prompt"]}]
  expected = theirs.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  assert rec["prompt_text"] == expected and rec["answer"] == "72"
  ids = theirs.encode(expected, add_special_tokens=False)
  n = int(batch["prompt_lengths"][0])
  assert n == len(ids) and batch["prompt_ids"][0, -n:].tolist() == ids
  assert (batch["prompt_ids"][0, :-n] == tok.pad_id).all() and not batch["prompt_mask"][0, :-n].any()
  with pytest.raises(ValueError, match="must contain \\{prompt\\}"):
    PlainFormat("no field")
  with pytest.raises(ValueError, match="kind must be 'plain' or 'chat'"):
    make_format({"kind": "raw"})


def test_chat_format_needs_a_template():
  from maxnorm_jax.data import CharTokenizer

  with pytest.raises(ValueError, match="needs a chat template"):
    load_records("builtin:arith", CharTokenizer(), prompt_format=ChatFormat(), builtin_n=2)
  fmt = ChatFormat(template="{{ bos_token }}{{ messages[-1].content }}")
  recs, _ = load_records("builtin:arith", CharTokenizer(), prompt_format=fmt, builtin_n=2, max_prompt_len=16)
  assert recs[0]["prompt_text"] == "<bos>" + recs[0]["prompt"]
  ids = np.asarray(recs[0]["prompt_ids"]).tolist()
  assert ids == [CharTokenizer.bos_id] + CharTokenizer().encode(recs[0]["prompt"])  # "<bos>" is one id
