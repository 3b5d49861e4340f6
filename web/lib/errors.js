// The one error type headscope throws. `code` is stable and machine-readable:
//   INVALID_ARGUMENT    a value, type or option is not allowed
//   SHAPE_MISMATCH      a tensor's rank or shape does not fit the config or the other inputs
//   MISSING_PARAMETER   a state_dict entry the config needs was not loaded
//   UNKNOWN_PARAMETER   a state_dict key this config does not have
//   RESOURCE_EXHAUSTED  the call would need more memory than allowed, or allocation failed
//   PARSE_ERROR         a case document is not in the case format (the message names the path)
//   IO_ERROR            a file could not be read (the CLI)
//   CANCELLED           the caller cancelled the request (a worker generate's options.signal), or
//                       changed the model it ran on (its weights, during a generation)
//   DISPOSED            the object was disposed, or its engine closed
//   LOAD_ERROR          init() could not load or compile the WebAssembly module
//   INTERNAL            a bug in headscope, or a heap too full to report an error properly
import { SCHEMA } from './schema.js';

/**
 * Every code a HeadscopeError has: the engine's Status codes (src/headscope/status.h, through
 * the schema), then the JavaScript side's own. index.d.ts's HeadscopeErrorCode and docs/errors.md's
 * table list the same (tests/js/schema.test.js checks both).
 */
export const ERROR_CODES = Object.freeze([...SCHEMA.errorCodes, 'DISPOSED', 'LOAD_ERROR', 'INTERNAL']);

// The longest message an error carries. Every piece of a caller's input a message quotes is cut
// to a few dozen characters where it is quoted (quoteInput); this is the backstop for lists that
// grow with a model (its keys, its hooks), so no message is ever megabytes long.
const MAX_MESSAGE_LENGTH = 4096;
function bounded(message) {
  if (typeof message !== 'string' || message.length <= MAX_MESSAGE_LENGTH) return message;
  let end = MAX_MESSAGE_LENGTH - 64;
  const c = message.charCodeAt(end - 1);
  if (c >= 0xd800 && c <= 0xdbff) end--;  // not half a surrogate pair
  return `${message.slice(0, end)}... (${message.length - end} more characters)`;
}

export class HeadscopeError extends Error {
  // A brand that no caller can forge (instanceof can be fooled by a Proxy or a prototype).
  #headscope = true;

  /**
   * @param {string} code @param {string} message
   * @param {{ cause?: unknown, argument?: string }} [options]
   */
  constructor(code, message, options) {
    super(bounded(message), options);
    this.name = 'HeadscopeError';
    this.code = code;
    // Errors of the core carry the id of the argument they are about ('options.attnMask',
    // 'config.numHeads', 'query', 'stateDict'; '' for none); errors raised in JS name it only
    // in the message.
    if (options?.argument !== undefined) this.argument = options.argument;
  }

  static is(value) {
    return value !== null && typeof value === 'object' && #headscope in value;
  }
}

/** True for errors headscope created (not for look-alikes). */
export const isHeadscopeError = (value) => HeadscopeError.is(value);
