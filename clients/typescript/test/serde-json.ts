// serde's JSON of a Rust value (as contracts/wire/frames.json and the
// scenarios of contracts/region-core/ hold it) and this client's objects,
// both ways: a variant with fields is `{"Variant": {…}}`, one without is
// `"Variant"`; this client has `{type, …}` with camelCase fields. Only a
// message's own field names change case; map keys (labels, metrics) stay.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export const camel = (name: string): string => name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
export const snake = (name: string): string => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** serde's JSON of a Rust enum value as this client's `{type, …}` object. */
export function fromSerde(value: unknown): Record<string, unknown> {
  if (typeof value === 'string') {
    return { type: value };
  }
  const [[type, fields]] = Object.entries(value as Record<string, Record<string, unknown>>) as [
    [string, Record<string, unknown>],
  ];
  return { type, ...Object.fromEntries(Object.entries(fields).map(([k, v]) => [camel(k), v])) };
}

/** This client's tagged object (`type` or `kind` names the variant) in serde's JSON shape. */
export function toSerde(value: object, tag: 'type' | 'kind' = 'type'): Json {
  const { [tag]: name, ...fields } = value as Record<string, Json>;
  const entries = Object.entries(fields);
  if (entries.length === 0) {
    return name as string;
  }
  return { [name as string]: Object.fromEntries(entries.map(([k, v]) => [snake(k), v])) };
}
