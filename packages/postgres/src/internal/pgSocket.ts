/**
 * The sockets postgres.js gets from us (its `socket` option), one connection's lifetime each.
 *
 * postgres.js 3.4.9 reuses a connection object after its socket closed, and state left over from
 * the old socket breaks the next one: a write still buffered when the socket closed leaves the write
 * timer set forever, so the next StartupMessage is never sent and every reconnect ends in
 * CONNECT_TIMEOUT; a write after the close dereferences a null socket in a `setImmediate` and ends the
 * process; a row counter left over makes the next result sparse; a stale error fails the next query.
 * So postgres.js never hears that a connection's socket closed: the socket we hand it reports the
 * close as an `error` (which fails the queries in flight and touches nothing else), swallows later
 * writes, and tells the pool (`onDead`), which throws the whole postgres.js instance away. A new
 * connection is a new instance with fresh state.
 *
 * TLS is negotiated here (SSLRequest, then `tls.connect`), because the TLS socket postgres.js would
 * create itself could not be watched this way; postgres.js sees a plain, already secured stream. The
 * connect timeout is kept here as well (until the server's first ReadyForQuery): postgres.js' timers
 * (connect, idle, lifetime) are off, as they are only cleared on a close it never hears of, and would
 * keep the process alive; the pool retires idle and old connections itself.
 * @internal
 */
import { EventEmitter } from "node:events"
import * as fs from "node:fs"
import * as net from "node:net"
import * as tls from "node:tls"

/** Where and how to connect. */
export interface SocketTarget {
  readonly host: string
  readonly port: number
  /** A Unix socket path (from `?host=/path`), instead of host and port. */
  readonly path: string | undefined
  readonly tls: TlsMode
  readonly connectTimeoutMillis: number
}

/** How to use TLS, from the URL's `sslmode` / `sslrootcert` / `sslcert` / `sslkey` / `sslnegotiation`. */
export type TlsMode =
  | { readonly _tag: "disable" }
  | {
    /** `prefer` / `allow`: plain when the server refuses TLS; `require`: no certificate check. */
    readonly _tag: "prefer" | "require" | "verify-ca" | "verify-full"
    readonly direct: boolean
    readonly options: tls.ConnectionOptions
  }

/** A connection error shaped like postgres.js' own (`code`, `address`, `port`). */
export const connectionError = (code: string, target: SocketTarget, cause?: unknown): Error => {
  const where = target.path ?? `${target.host}:${target.port}`
  const error = Object.assign(new Error(`write ${code} ${where}`), {
    code,
    errno: code,
    address: target.path ?? target.host,
    ...(target.path === undefined ? { port: target.port } : {})
  })
  if (cause !== undefined) Object.defineProperty(error, "cause", { value: cause, enumerable: false })
  return error
}

/** Reads the TLS settings of a URL, libpq-style. Throws with a message (no secrets) when they are unusable. */
export const tlsMode = (params: URLSearchParams, env: Record<string, string | undefined>): TlsMode => {
  const rootCert = params.get("sslrootcert")
  let mode = params.get("sslmode") ?? params.get("ssl") ?? env["PGSSLMODE"] ?? "disable"
  if (mode === "true") mode = "require"
  if (mode === "false") mode = "disable"
  if (rootCert === "system" && mode !== "disable") mode = "verify-full"
  if (mode === "disable") return { _tag: "disable" }
  const read = (name: string) => {
    const file = params.get(name)
    if (file === null || file === "system") return undefined
    try {
      return fs.readFileSync(file)
    } catch {
      throw new Error(`${name} ${JSON.stringify(file)} cannot be read`)
    }
  }
  const options: tls.ConnectionOptions = {
    ...(read("sslrootcert") === undefined ? {} : { ca: read("sslrootcert") }),
    ...(read("sslcert") === undefined ? {} : { cert: read("sslcert") }),
    ...(read("sslkey") === undefined ? {} : { key: read("sslkey") })
  }
  const direct = (params.get("sslnegotiation") ?? env["PGSSLNEGOTIATION"]) === "direct"
  switch (mode) {
    case "allow":
    case "prefer":
      return { _tag: "prefer", direct, options: { ...options, rejectUnauthorized: false } }
    case "require":
      return { _tag: "require", direct, options: { ...options, rejectUnauthorized: false } }
    case "verify-ca":
      return { _tag: "verify-ca", direct, options: { ...options, checkServerIdentity: () => undefined } }
    case "verify-full":
      return { _tag: "verify-full", direct, options }
    default:
      throw new Error(
        `sslmode ${JSON.stringify(mode)} is not one of disable, allow, prefer, require, verify-ca, verify-full`
      )
  }
}

/** Every socket this client opened, so that closing the client can destroy those still open. */
export type SocketRegistry = Set<net.Socket>

const track = (sockets: SocketRegistry, socket: net.Socket): net.Socket => {
  sockets.add(socket)
  socket.once("close", () => sockets.delete(socket))
  return socket
}

/** A socket that failed before postgres.js could use it: it reports `error` once, then nothing. */
const failed = (error: Error): EventEmitter => {
  const socket = Object.assign(new EventEmitter(), {
    readyState: "closed",
    write: () => true,
    end: () => {},
    destroy: () => {},
    setKeepAlive: () => {}
  })
  setTimeout(() => socket.emit("error", error), 0)
  return socket
}

/** Connects, negotiating TLS as configured. Never rejects: a failure is a socket that reports it. */
const open = async (target: SocketTarget, sockets: SocketRegistry): Promise<net.Socket | tls.TLSSocket> => {
  const raw = track(
    sockets,
    target.path === undefined
      ? net.connect({ host: target.host, port: target.port })
      : net.connect({ path: target.path })
  )
  // An 'error' without a listener would be thrown: whoever uses the socket listens as well (the
  // guard, postgres.js for cancel requests, or the TLS socket on top of it, which reports the close).
  raw.on("error", () => {})
  const mode = target.tls
  if (mode._tag === "disable") return raw
  const deadline = setTimeout(
    () => raw.destroy(connectionError("CONNECT_TIMEOUT", target)),
    target.connectTimeoutMillis
  )
  try {
    if (!mode.direct) {
      // SSLRequest: length 8, code 80877103; the server answers one byte, S or N.
      const answer = await new Promise<number>((resolve, reject) => {
        const onError = (error: Error) => reject(error)
        const onClose = () => reject(connectionError("CONNECTION_CLOSED", target))
        raw.once("error", onError)
        raw.once("close", onClose)
        raw.once("data", (data: Buffer) => {
          raw.off("error", onError).off("close", onClose)
          resolve(data[0] ?? 0)
        })
        raw.write(Buffer.from([0, 0, 0, 8, 4, 210, 22, 47]))
      })
      if (answer !== 83) {
        if (mode._tag === "prefer") return raw
        throw connectionError("SSL_REFUSED", target)
      }
    }
    const secure = tls.connect({
      ...mode.options,
      socket: raw,
      ...(net.isIP(target.host) || target.path !== undefined ? {} : { servername: target.host }),
      ...(mode.direct ? { ALPNProtocols: ["postgresql"] } : {})
    })
    await new Promise<void>((resolve, reject) => {
      const onClose = () => reject(connectionError("CONNECTION_CLOSED", target))
      secure.once("error", reject)
      raw.once("close", onClose)
      secure.once("secureConnect", () => {
        secure.off("error", reject)
        raw.off("close", onClose)
        resolve()
      })
    })
    return secure
  } catch (error) {
    raw.destroy()
    throw error
  } finally {
    clearTimeout(deadline)
  }
}

/**
 * The socket postgres.js talks to for one connection: data and `drain` pass through; the real
 * socket's close (or error) reaches postgres.js once, as an `error`, and then `onDead` runs. Writes
 * after that are dropped (their queries have failed already).
 */
class GuardedSocket extends EventEmitter {
  private dead = false
  private readonly socket: net.Socket | tls.TLSSocket
  private readonly target: SocketTarget
  private readonly onDead: () => void
  private readonly onReady: () => void
  /** Until the first ReadyForQuery: the connect timeout, and where the next message starts. */
  private deadline: ReturnType<typeof setTimeout> | undefined
  private skip = 0
  private header: Array<number> = []
  constructor(socket: net.Socket | tls.TLSSocket, target: SocketTarget, onDead: () => void, onReady: () => void) {
    super()
    this.socket = socket
    this.target = target
    this.onDead = onDead
    this.onReady = onReady
    this.deadline = setTimeout(() => this.die(connectionError("CONNECT_TIMEOUT", target)), target.connectTimeoutMillis)
    socket.on("data", (data: Buffer) => {
      if (this.dead) return
      if (this.deadline !== undefined) this.scan(data)
      this.emit("data", data)
    })
    socket.on("drain", () => this.dead || this.emit("drain"))
    socket.on("error", (error: Error) => this.die(error))
    socket.on("close", () => this.die(connectionError("CONNECTION_CLOSED", target)))
  }
  /** Looks for the server's first ReadyForQuery ('Z'): the connection is up, the deadline is off. */
  private scan(data: Buffer) {
    let i = 0
    while (i < data.length && this.deadline !== undefined) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, data.length - i)
        this.skip -= n
        i += n
        continue
      }
      this.header.push(data[i++]!)
      if (this.header.length < 5) continue
      const [type, a, b, c, d] = this.header as [number, number, number, number, number]
      this.header = []
      this.skip = ((a << 24) | (b << 16) | (c << 8) | d) - 4
      if (type === 90) {
        clearTimeout(this.deadline)
        this.deadline = undefined
        this.onReady()
      }
    }
  }
  private die(error: Error) {
    if (this.dead) return
    this.dead = true
    clearTimeout(this.deadline)
    this.socket.destroy()
    // No listener yet would make EventEmitter throw; postgres.js registers its own at once.
    if (this.listenerCount("error") > 0) this.emit("error", error)
    this.onDead()
  }
  get readyState(): string {
    return this.dead ? "closed" : "open"
  }
  get host(): string {
    return this.target.path ?? this.target.host
  }
  get port(): number {
    return this.target.port
  }
  write(data: Uint8Array | string, callback?: (error?: Error | null) => void): boolean {
    if (this.dead) {
      if (callback !== undefined) queueMicrotask(() => callback(connectionError("CONNECTION_CLOSED", this.target)))
      return true
    }
    return this.socket.write(data, callback)
  }
  end(data?: Uint8Array | string): this {
    if (this.dead) return this
    if (data === undefined) this.socket.end()
    else this.socket.end(data)
    return this
  }
  destroy(): this {
    this.socket.destroy()
    return this
  }
  setKeepAlive(enable?: boolean, delay?: number): this {
    this.socket.setKeepAlive(enable, delay)
    return this
  }
  resume(): this {
    this.socket.resume()
    return this
  }
  pause(): this {
    this.socket.pause()
    return this
  }
}

/**
 * The `socket` option of one postgres.js instance (one connection). The first call is that
 * connection's socket, guarded; later calls are postgres.js' cancel requests, which get plain
 * sockets (their connection object is thrown away after one use). `onReady` runs when the server
 * is ready for the first query (startup and authentication done).
 */
export const socketFactory = (
  target: SocketTarget,
  sockets: SocketRegistry,
  onDead: () => void,
  onReady: () => void = () => {}
) => {
  let used = false
  return async (): Promise<EventEmitter> => {
    const main = !used
    used = true
    try {
      const socket = await open(target, sockets)
      return main ? new GuardedSocket(socket, target, onDead, onReady) : socket
    } catch (error) {
      if (main) onDead()
      return failed(
        error instanceof Error && "code" in error ? error : connectionError("CONNECTION_CLOSED", target, error)
      )
    }
  }
}
