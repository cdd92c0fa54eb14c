// The push worker's entry point: written by the push-worker change (issue 19).
export {};
