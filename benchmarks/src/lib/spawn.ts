// Where processes start from, and how they get their open-file limit.

import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const BENCH_ROOT = fileURLToPath(new URL('../../', import.meta.url));

