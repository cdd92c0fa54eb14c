import { useEffect, useState } from 'preact/hooks';

/** Date.now(), re-read every `everyMs` (for "N s ago" texts). */
export function useNow(everyMs: number): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(timer);
  }, [everyMs]);
  return now;
}
