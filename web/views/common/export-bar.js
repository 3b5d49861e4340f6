// The export toolbar of a view: a button per format, each downloading what the view makes of it.
import { download } from './export-data.js';

/**
 * The export toolbar of a view: a button per format; `make(format)` resolves to a Blob,
 * `name(format)` is its file name.
 */
export function exportBar(formats, make, name, onError) {
  const bar = document.createElement('div');
  bar.className = 'hs-export';
  bar.setAttribute('role', 'group');
  bar.setAttribute('aria-label', 'Export');
  const label = document.createElement('span');
  label.className = 'hs-export-label';
  label.textContent = 'Export:';
  bar.append(label);
  const labels = { svg: 'SVG', png: 'PNG', json: 'JSON', csv: 'CSV', case: 'Case file' };
  for (const f of formats) {
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.export = f;
    b.textContent = labels[f];
    b.title = f === 'case' ? 'The current numbers as a case document (with the expected output)'
      : `The current view as ${labels[f]}`;
    b.addEventListener('click', async () => {
      try {
        download(await make(f), name(f), bar);
      } catch (e) {
        onError(e);
      }
    });
    bar.append(b);
  }
  return bar;
}
