/**
 * npx (`npm exec`) runs the gateway as its grandchild (npm, then `sh -c`,
 * then node) and, when it gets SIGTERM itself, exits without passing the
 * signal on (checked with npm 10 here): the gateway would be orphaned and go
 * on serving, and a supervisor that stops "the process" it started would
 * never see it drain. So under npx (npm sets `npm_command=exec` for what it
 * runs) the gateway watches its parent: once the process that started it is
 * gone, it drains as for SIGTERM. Any other start (node itself, a service
 * manager, a container entrypoint, nohup) is left alone: there a parent that
 * exits says nothing about the gateway.
 */
/** How often the parent is looked at: a drain starts at most this late after npx went. */
const WATCH_MS = 250;

/** Starts watching when launched by npx; calls `gone` once, when the launcher is gone. */
export function watchLauncher(env: NodeJS.ProcessEnv, gone: (reason: string) => void): NodeJS.Timeout | undefined {
  if (env.npm_command !== 'exec') return undefined;
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    gone('npx exited (it does not pass SIGTERM on)');
  }, WATCH_MS);
  timer.unref();
  return timer;
}
