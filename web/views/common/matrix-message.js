// The message line under an editable matrix (matrix.js): why typed text was not used, tied to its
// cell (aria-invalid, aria-describedby) while the cell holds it.
//
// `m` is the matrix's shared state (matrix.js): element, cells, and `invalid` (the cell holding
// text that is not a number, or -1), which this module keeps.
import { statusEl } from './dom.js';

let messageIds = 0;

/** @returns {{ show(text, k): void, hide(): void, setInvalid(k, text): void, clearInvalid(): void }} */
export function createCellMessage(m) {
  let message = null;

  function ensureMessage() {
    if (message) return message;
    message = statusEl('p', 'hs-cell-message');
    message.id = `hs-cell-message-${++messageIds}`;
    message.hidden = true;
    m.element.append(message);
    return message;
  }

  // `k`: the cell the text is about (an error), or null (a note).
  function show(text, k) {
    const box = ensureMessage();
    box.textContent = text;
    box.hidden = false;
    box.classList.toggle('hs-error', k !== null);
    // Under the matrix, moved left if it would leave the screen (a narrow matrix at the right).
    box.style.left = '0px';
    const right = box.getBoundingClientRect().right;
    const width = document.documentElement.clientWidth;
    if (right > width - 4) {
      const boxLeft = m.element.getBoundingClientRect().left;
      box.style.left = `${-Math.min(right - width + 4, Math.max(0, boxLeft - 4))}px`;
    }
  }

  function hide() {
    if (message) {
      message.hidden = true;
      message.textContent = '';
    }
  }

  function setInvalid(k, text) {
    if (m.invalid !== k) clearInvalid();
    m.invalid = k;
    const input = m.cells[k].content;
    input.setAttribute('aria-invalid', 'true');
    show(text, k);
    input.setAttribute('aria-describedby', message.id);
  }

  function clearInvalid() {
    if (m.invalid < 0) return;
    const input = m.cells[m.invalid]?.content;
    if (input) {
      input.removeAttribute('aria-invalid');
      input.removeAttribute('aria-describedby');
    }
    m.invalid = -1;
  }

  return { show, hide, setInvalid, clearInvalid };
}
