// The three summary numbers of a Heads view card (cards.js): the engine's entropy, mean distance
// and confidence of each head (options.headStats), with their definitions as tooltips.
import { el, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';

// One summary number of a card: "name value", its definition as the tooltip. data-stat names the
// engine's statistic it shows (entropy, distance, maxWeight).
export function statItem(stat) {
  const span = el('span', 'hs-head-stat');
  span.dataset.stat = stat;
  const name = el('span', 'hs-head-stat-name');
  const value = el('strong');
  span.append(name, value);
  return {
    element: span,
    set(label, text, detail) {
      setText(name, `${label} `);
      setText(value, text);
      span.title = detail;
    },
  };
}

/** A statistic as a card shows it: `decimals` places, '—' for NaN (a head with no query rows left). */
export function formatStat(value, decimals) {
  return Number.isNaN(value) ? '—' : formatNumber(value, decimals);
}

/** Decimal places the cards show of each statistic. */
export const STAT_DECIMALS = { entropy: 2, distance: 1, maxWeight: 2 };

// What each statistic is, for the tooltips: over the S' keys (bias_k and the zero key included),
// the distance over the S keys that have a position.
export function statDefinitions(data) {
  const { S, sourceKeys } = data;
  const extra = S > sourceKeys
    ? `, over the ${sourceKeys} keys with a position (bias_k and the zero key add nothing)` : '';
  return {
    entropy: `Mean over queries of the row's entropy; ${formatNumber(Math.log(S), 2)} nats (ln ${S}) ` +
      'would be uniform attention',
    distance: `Average over queries of Σ_j w_ij · |i − j|${extra}`,
    maxWeight: 'Average over queries of the row\'s largest weight, max_j w_ij: 1 when each query looks at ' +
      `one key, ${formatNumber(1 / S, 2)} (1/${S}) would be uniform attention`,
  };
}

// A card's three numbers: `values` { entropy, distance, maxWeight }, `details` their tooltips.
export function setStats(c, values, details) {
  c.entropy.set('entropy', `${formatStat(values.entropy, STAT_DECIMALS.entropy)} nats`, details.entropy);
  c.distance.set('mean distance', `${formatStat(values.distance, STAT_DECIMALS.distance)} tokens`, details.distance);
  c.confidence.set('confidence', formatStat(values.maxWeight, STAT_DECIMALS.maxWeight), details.maxWeight);
}
