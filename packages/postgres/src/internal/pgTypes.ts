/**
 * Array types without postgres.js' `fetch_types`.
 *
 * With `fetch_types` on (its default), postgres.js queries `pg_type` on every new connection and
 * does not await that query: a connection terminated in that window (failover, restart,
 * `pg_terminate_backend`) rejects a promise nobody handles, which ends a Node process. So the client
 * turns it off and registers array parsers and serializers itself: the built-in types from a fixed
 * table (their OIDs never change), and the array types a database defines itself (enums, domains,
 * composite types) from one awaited catalog query when the client starts.
 * @internal
 */
import type postgres from "postgres"

/** An array type: its element type and the element delimiter (`;` for `box`, `,` for all others). */
export interface ArrayType {
  readonly element: number
  readonly array: number
  readonly delimiter: string
}

/**
 * Built-in base, range and multirange types and their array types, as in `pg_type` (PostgreSQL
 * 14-18; checked against the server in the tests). Catalog row types are left out.
 */
const builtin: ReadonlyArray<readonly [element: number, array: number]> = [
  [16, 1000],
  [17, 1001],
  [18, 1002],
  [19, 1003],
  [20, 1016],
  [21, 1005],
  [22, 1006],
  [23, 1007],
  [24, 1008],
  [25, 1009],
  [26, 1028],
  [27, 1010],
  [28, 1011],
  [29, 1012],
  [30, 1013],
  [114, 199],
  [142, 143],
  [600, 1017],
  [601, 1018],
  [602, 1019],
  [603, 1020],
  [604, 1027],
  [628, 629],
  [650, 651],
  [700, 1021],
  [701, 1022],
  [718, 719],
  [774, 775],
  [790, 791],
  [829, 1040],
  [869, 1041],
  [1033, 1034],
  [1042, 1014],
  [1043, 1015],
  [1082, 1182],
  [1083, 1183],
  [1114, 1115],
  [1184, 1185],
  [1186, 1187],
  [1266, 1270],
  [1560, 1561],
  [1562, 1563],
  [1700, 1231],
  [1790, 2201],
  [2202, 2207],
  [2203, 2208],
  [2204, 2209],
  [2205, 2210],
  [2206, 2211],
  [2249, 2287],
  [2275, 1263],
  [2950, 2951],
  [2970, 2949],
  [3220, 3221],
  [3614, 3643],
  [3615, 3645],
  [3642, 3644],
  [3734, 3735],
  [3769, 3770],
  [3802, 3807],
  [3904, 3905],
  [3906, 3907],
  [3908, 3909],
  [3910, 3911],
  [3912, 3913],
  [3926, 3927],
  [4072, 4073],
  [4089, 4090],
  [4096, 4097],
  [4191, 4192],
  [4451, 6150],
  [4532, 6151],
  [4533, 6152],
  [4534, 6153],
  [4535, 6155],
  [4536, 6157],
  [5038, 5039],
  [5069, 271]
]

/** The built-in array types. */
export const builtinArrayTypes: ReadonlyArray<ArrayType> = builtin.map(([element, array]) => ({
  element,
  array,
  delimiter: element === 603 ? ";" : ","
}))

/**
 * The array types of this database's own types (OID 16384 and up: enums, domains, composite and
 * range types, extensions' types), as `{ element, array, delimiter }` rows.
 */
export const userArrayTypesQuery =
  `SELECT e.oid::int AS element, e.typarray::int AS array, e.typdelim::text AS delimiter
  FROM pg_catalog.pg_type e
  WHERE e.typarray <> 0 AND e.oid >= 16384`

type Parser = (text: string) => unknown
type Serializer = (value: unknown) => unknown

/**
 * Parses PostgreSQL's text form of an array (`{a,"b c",NULL}`, nested `{{1,2},{3,4}}`, with an
 * optional `[0:1]=` bounds prefix) into JS arrays, applying `parse` to every non-NULL element.
 */
export const parseArray = (text: string, parse: Parser | undefined, delimiter = ","): unknown => {
  let i = 0
  if (text[0] === "[") {
    // explicit bounds: `[1:2][1:2]={...}`
    const equals = text.indexOf("=")
    if (equals === -1) return text
    i = equals + 1
  }
  if (text[i] !== "{") return text
  const element = (raw: string, quoted: boolean): unknown =>
    !quoted && raw.toUpperCase() === "NULL" ? null : parse === undefined ? raw : parse(raw)
  const level = (): Array<unknown> => {
    i++ // the opening brace
    const out: Array<unknown> = []
    let current = ""
    let quoted = false
    let started = false
    while (i < text.length) {
      const c = text[i]!
      if (c === "{" && !started) {
        out.push(level())
        started = false
        // `level` stops after the closing brace; a delimiter or `}` follows
        continue
      }
      if (c === "\"") {
        quoted = true
        started = true
        i++
        while (i < text.length && text[i] !== "\"") {
          if (text[i] === "\\") i++
          current += text[i] ?? ""
          i++
        }
        i++ // the closing quote
        continue
      }
      if (c === delimiter || c === "}") {
        if (started) out.push(element(current, quoted))
        current = ""
        quoted = false
        started = false
        i++
        if (c === "}") return out
        continue
      }
      if (c === "\\") {
        i++
        current += text[i] ?? ""
        started = true
        i++
        continue
      }
      if (!started && (c === " " || c === "\t" || c === "\n" || c === "\r")) {
        i++
        continue
      }
      current += c
      started = true
      i++
    }
    return out
  }
  return level()
}

const escapeElement = (text: string): string => text.replace(/\\/g, "\\\\").replace(/"/g, "\\\"")

/**
 * Writes a JS array (nested for more dimensions) as PostgreSQL's array text form, every element
 * quoted, `null` / `undefined` as NULL. A value that is not an array is passed on unchanged (a
 * ready-made `{...}` literal string, for one). With `json` elements, a nested JS array is a JSON
 * value, not a dimension.
 */
export const serializeArray = (
  value: unknown,
  serialize: Serializer | undefined,
  delimiter = ",",
  json = false
): unknown => {
  if (!Array.isArray(value)) return value
  const write = (items: ReadonlyArray<unknown>): string =>
    "{" + items.map((item) =>
      item === null || item === undefined
        ? "NULL"
        : Array.isArray(item) && !json
        ? write(item)
        : "\"" + escapeElement(String(serialize === undefined ? item : serialize(item))) + "\""
    ).join(delimiter) + "}"
  return write(value)
}

/**
 * Registers parsers and serializers for `types` on a postgres.js instance (every connection of the
 * pool reads them from the shared options), unless the array type has its own already. Element
 * parsers and serializers are looked up when the array type is registered, as postgres.js does.
 */
export const registerArrayTypes = (sql: postgres.Sql, types: ReadonlyArray<ArrayType>): void => {
  const { parsers, serializers } = sql.options
  for (const { array, delimiter, element } of types) {
    if (parsers[array] !== undefined && serializers[array] !== undefined) continue
    const parse = parsers[element] as Parser | undefined
    const serialize = serializers[element] as Serializer | undefined
    parsers[array] = (text: string) => parseArray(text, parse, delimiter)
    const json = element === 114 || element === 3802
    serializers[array] = (value: unknown) => serializeArray(value, serialize, delimiter, json)
  }
}
