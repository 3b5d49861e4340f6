// The loader's file handling without DOM: sizes and times as people read them, and a file's bytes
// as text, exactly (invalid UTF-8 is an error that says where, never U+FFFD).
import { HeadscopeError } from '../lib/errors.js';

/** "812 bytes", "1.4 MB", "64 MB": sizes the way people read them (MB = 2^20 bytes, as the limit). */
export function formatBytes(n) {
  if (n < 1024) return `${n} bytes`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  const mb = n / 1024 / 1024;
  return `${mb < 10 ? mb.toFixed(1) : Math.round(mb)} MB`;
}

export function formatSeconds(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

// TextDecoder with fatal: true says only that the bytes are not UTF-8; where is what makes the
// error something to act on. The longest prefix that decodes as a stream (where a character cut at
// the end is not yet an error) ends just before the byte that cannot continue; the character it
// breaks starts at most 3 bytes earlier, where the longest prefix that decodes completely ends.
function invalidUtf8Span(bytes) {
  const decodes = (n, stream) => {
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, n), { stream });
      return true;
    } catch {
      return false;
    }
  };
  let ok = 0;
  let bad = bytes.length + 1;  // past the end: the file may only end inside a character
  if (!decodes(bytes.length, true)) {
    bad = bytes.length;
    while (bad - ok > 1) {
      const mid = ok + Math.floor((bad - ok) / 2);
      if (decodes(mid, true)) ok = mid;
      else bad = mid;
    }
  }
  const end = Math.min(bad, bytes.length);  // the bytes [start, end) are the broken character
  let start = bad - 1;
  while (start > 0 && !decodes(start, false)) start--;
  const hex = Array.from(bytes.subarray(start, end), (b) => b.toString(16).padStart(2, '0')).join(' ');
  return bad > bytes.length ? `it ends inside a character: bytes ${hex} at offset ${start}`
    : `bytes ${hex} at offset ${start}`;
}

/**
 * The file's bytes as text, exactly: invalid UTF-8 is an error instead of U+FFFD replacement
 * characters, and a leading byte order mark is kept for parseCase to rule on.
 */
export function decodeCaseBytes(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new HeadscopeError('PARSE_ERROR', `$: the file is not valid UTF-8 text (${invalidUtf8Span(bytes)}); ` +
      'case files are JSON, which is UTF-8');
  }
}
