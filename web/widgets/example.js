// The example tutorial's one script: the mirror widget follows the log-line widget's sentence.
// Any page can link widgets this way: listen for headscope-change, call setState on another.
await customElements.whenDefined('headscope-heads');
const log = document.querySelector('#log');
const mirror = document.querySelector('#mirror');
const follow = (state) => mirror.setState({ text: state.text }).catch((e) => console.warn(e.message));
log.addEventListener('headscope-change', (e) => follow(e.detail.state));
await log.ready;
follow(log.state);
