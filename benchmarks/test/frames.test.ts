import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FrameSplitter, Op, decodeFrame, encodeFrame } from '@sluice/gateway/testing';
import { encodeClientFrame, patchDigits, readDigits } from '../src/lib/codec.ts';

const OP_TEXT = Op.Text;
const OP_PING = Op.Ping;
const unmaskClientFrame = decodeFrame;
const encodeServerFrame = (payload: string, opcode: number = Op.Text): Buffer => encodeFrame({ opcode, payload, mask: false });

function collect(): { frames: Array<{ op: number; text: string }>; split: FrameSplitter } {
  const frames: Array<{ op: number; text: string }> = [];
  const split = new FrameSplitter((op, _fin, buf, s, e) => frames.push({ op, text: buf.toString('utf8', s, e) }));
  return { frames, split };
}

test('client frames are masked and decode back to their payload, at every length class', () => {
  for (const len of [0, 1, 125, 126, 1000, 65535, 65536, 70000]) {
    const payload = Buffer.alloc(len, 'a');
    const f = encodeClientFrame(payload);
    assert.equal(f.bytes[1]! & 0x80, 0x80, 'mask bit set');
    const back = unmaskClientFrame(f.bytes);
    assert.equal(back.opcode, OP_TEXT);
    assert.ok(back.payload.equals(payload), `length ${len}`);
  }
});

test('patched digits read back through the mask, and the rest of the frame is untouched', () => {
  const text = '{"ref":"111111111111111","x":1}';
  const f = encodeClientFrame(text);
  const bytes = Buffer.from(f.bytes);
  patchDigits(bytes, 0, f, 8, 123456789012345, 15);
  assert.equal(unmaskClientFrame(bytes).payload.toString(), '{"ref":"123456789012345","x":1}');
});

test('patching frame i of a batch changes only frame i', () => {
  const f = encodeClientFrame('{"t":1111}');
  const batch = Buffer.concat([f.bytes, f.bytes, f.bytes]);
  patchDigits(batch, f.bytes.length, f, 5, 4321, 4);
  const len = f.bytes.length;
  assert.equal(unmaskClientFrame(batch.subarray(0, len)).payload.toString(), '{"t":1111}');
  assert.equal(unmaskClientFrame(batch.subarray(len, 2 * len)).payload.toString(), '{"t":4321}');
  assert.equal(unmaskClientFrame(batch.subarray(2 * len)).payload.toString(), '{"t":1111}');
});

test('the splitter yields every frame whatever the chunk boundaries', () => {
  const texts = ['a', 'x'.repeat(125), 'y'.repeat(126), 'z'.repeat(70000), '{"type":"reply"}'];
  const stream = Buffer.concat([...texts.map((t) => encodeServerFrame(t)), encodeServerFrame('p', OP_PING)]);
  for (const step of [1, 2, 3, 7, 64, 1000, stream.length]) {
    const { frames, split } = collect();
    for (let i = 0; i < stream.length; i += step) split.push(stream.subarray(i, i + step));
    assert.deepEqual(frames.map((f) => f.text), [...texts, 'p'], `chunk size ${step}`);
    assert.equal(frames.at(-1)!.op, OP_PING);
    assert.equal(split.buffered, 0);
  }
});

test('the splitter refuses a masked server frame', () => {
  const { split } = collect();
  assert.throws(() => split.push(encodeClientFrame('hi').bytes), /masked/);
});

test('readDigits stops at the first non-digit and reports no digits as -1', () => {
  const b = Buffer.from('x123"');
  assert.equal(readDigits(b, 1, b.length), 123);
  assert.equal(readDigits(b, 0, b.length), -1);
});
