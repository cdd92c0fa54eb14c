/** The activity log: every action taken in this page, newest first, with its result or error. */
import { clock } from './format.ts';

export interface Activity {
  readonly seq: number;
  readonly at: number;
  /** What was asked: `Publish to topic room.1 (tenant default)`. */
  readonly action: string;
  readonly ok: boolean;
  /** The result, or the error message. */
  readonly result: string;
}

/** The most entries kept. */
export const ACTIVITY_LIMIT = 200;

export function ActivityLog(props: { entries: readonly Activity[] }) {
  return (
    <section class="card" aria-labelledby="activity-h">
      <h2 id="activity-h">Activity</h2>
      <p class="hint">What was done from this page (this tab only), newest first.</p>
      <ol class="activity" data-testid="activity-log">
        {props.entries.length === 0 && <li class="empty">No action yet.</li>}
        {props.entries.map((e) => (
          <li key={e.seq} class={e.ok ? 'ok' : 'err'} data-testid="activity-entry">
            <time dateTime={new Date(e.at).toISOString()}>{clock(e.at)}</time>
            <span class="what">{e.action}</span>
            <span class="result">{e.ok ? '✓ ' : '✗ '}{e.result}</span>
          </li>
        ))}
      </ol>
    </section>
  );
}
