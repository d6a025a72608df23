"""The `openai` Python SDK against `serverbench serve` (with --tokenizer): streamed chat with content as a
list of parts, streamed and whole completions, log-probabilities with echo, and token counts that agree
with usage when the text is counted with the same tokenizer.

    pip install openai tokenizers
    serverbench serve --port 8123 --time-scale 20 --model m --tokenizer tests/fixtures/tokenizers/byte-level-bpe-3k.json &
    python3 scripts/openai_sdk_check.py http://127.0.0.1:8123 tests/fixtures/tokenizers/byte-level-bpe-3k.json
"""
import sys

from openai import OpenAI
from tokenizers import Tokenizer

url, tokenizer_path = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(tokenizer_path)
client = OpenAI(base_url=url + "/v1", api_key="unused")
count = lambda text: len(tok.encode(text, add_special_tokens=False).ids)
failures = []


def check(name, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    if not ok:
        failures.append(name)


# Streamed chat, content as a list of parts (GuideLLM's form), usage at the end.
stream = client.chat.completions.create(
    model="m",
    messages=[{"role": "user", "content": [{"type": "text", "text": "the replay of the simulator"}]}],
    max_tokens=48,
    stream=True,
    stream_options={"include_usage": True},
    extra_body={"ignore_eos": True},
)
text, usage, chunks = "", None, 0
for c in stream:
    if c.choices and c.choices[0].delta.content:
        text += c.choices[0].delta.content
        chunks += 1
    if c.usage:
        usage = c.usage
check("chat stream", usage is not None and usage.completion_tokens == 48 and chunks > 0,
      f"{chunks} chunks, usage {usage.completion_tokens if usage else None}")
check("chat text counted by the tokenizer", count(text) == 48, f"{count(text)} tokens")
check("chat prompt tokens", usage.prompt_tokens == count("the replay of the simulator"),
      f"server {usage.prompt_tokens}, tokenizer {count('the replay of the simulator')}")

# Whole completion of a text prompt.
r = client.completions.create(model="m", prompt=" the replay", max_tokens=32, extra_body={"ignore_eos": True})
check("completion", r.usage.completion_tokens == 32 and count(r.choices[0].text) == 32,
      f"usage {r.usage.completion_tokens}, text {count(r.choices[0].text)} tokens")

# Log-probabilities with echo (teacher forcing).
r = client.completions.create(model="m", prompt=[5, 6, 7, 8], max_tokens=1, echo=True, logprobs=2,
                              extra_body={"return_tokens_as_token_ids": True})
lp = r.choices[0].logprobs
check("echo + logprobs", lp.token_logprobs[0] is None and len(lp.tokens) == 5 and lp.tokens[0] == "token_id:5",
      f"{len(lp.tokens)} tokens, first {lp.tokens[0]}")

# Refusals name their field.
try:
    client.completions.create(model="m", prompt="x", max_tokens=4, n=2)
    check("n = 2 refused", False, "accepted")
except Exception as e:  # the SDK raises BadRequestError
    check("n = 2 refused", "n:" in str(e), str(e)[:120])

print("all passed" if not failures else f"failed: {failures}")
sys.exit(1 if failures else 0)
