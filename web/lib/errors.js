// The one error type headscope throws. `code` is stable and machine-readable:
//   INVALID_ARGUMENT    a value, type or option is not allowed
//   SHAPE_MISMATCH      a tensor's rank or shape does not fit the config or the other inputs
//   MISSING_PARAMETER   a state_dict entry the config needs was not loaded
//   UNKNOWN_PARAMETER   a state_dict key this config does not have
//   RESOURCE_EXHAUSTED  the call would need more memory than allowed, or allocation failed
//   PARSE_ERROR         a case document is not in the case format (the message names the path)
//   DISPOSED            the object was disposed
//   LOAD_ERROR          init() could not load or compile the WebAssembly module
//   INTERNAL            a bug in headscope, or a heap too full to report an error properly
export class HeadscopeError extends Error {
  /** @param {string} code @param {string} message */
  constructor(code, message) {
    super(message);
    this.name = 'HeadscopeError';
    this.code = code;
  }
}
