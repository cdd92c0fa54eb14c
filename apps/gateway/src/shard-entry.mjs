// The file piscina loads. piscina tries require() first, and under tsx a .ts
// file required that way is transformed to CommonJS, whose re-exports are
// getters called on every use (about 10% of the hot path, measured with
// perf). The top-level await makes require() refuse this file, so piscina
// falls back to import(), and tsx's ESM API loads the shard and its packages
// as ES modules.
import { tsImport } from 'tsx/esm/api';

const shard = await tsImport('./shard/index.ts', import.meta.url);
export default shard.default;
