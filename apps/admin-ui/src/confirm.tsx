/**
 * The confirmation every action goes through: a modal <dialog> (not
 * window.confirm, which a browser test cannot click) that says exactly what
 * will happen, with Confirm and Cancel. Escape cancels.
 */
import { useEffect, useRef } from 'preact/hooks';

export interface ConfirmRequest {
  readonly text: string;
  readonly resolve: (ok: boolean) => void;
}

export function ConfirmDialog(props: { request: ConfirmRequest | undefined; onDone: (ok: boolean) => void }) {
  const { request, onDone } = props;
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d === null) return;
    if (request !== undefined && !d.open) d.showModal();
    if (request === undefined && d.open) d.close();
  }, [request]);
  return (
    <dialog
      ref={ref}
      class="confirm"
      data-testid="confirm-dialog"
      aria-labelledby="confirm-title"
      onCancel={(e) => {
        e.preventDefault();
        onDone(false);
      }}
    >
      <h2 id="confirm-title">Please confirm</h2>
      <p data-testid="confirm-text">{request?.text ?? ''}</p>
      <div class="buttons">
        <button type="button" class="danger" data-testid="confirm-ok" onClick={() => onDone(true)}>Confirm</button>
        <button type="button" data-testid="confirm-cancel" autofocus onClick={() => onDone(false)}>Cancel</button>
      </div>
    </dialog>
  );
}
