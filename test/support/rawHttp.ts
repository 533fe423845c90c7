/**
 * A raw HTTP/1.1 client over a TCP socket, for what `fetch` hides: sending a body far larger than
 * memory (generated chunk by chunk, with `Content-Length` or chunked), stopping as soon as the
 * server answers, and counting how many bytes the server let through before it did.
 */
import * as net from "node:net"

/** What the server answered, and how much of the body was written before it did. */
export interface RawReply {
  /** 0 when the server closed the connection without an answer. */
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly json: any
  /** Body bytes written to the socket before the answer (or the close). */
  readonly sent: number
}

/** Options of {@link send}. */
export interface SendOptions {
  readonly method?: string
  /** The request target, path and query, sent as is (no encoding). */
  readonly target: string
  readonly headers?: Readonly<Record<string, string>>
  /** Body bytes to send, generated from `fill`; 0 for none. */
  readonly size?: number
  /** The byte pattern of the body (repeated); default `a`. */
  readonly fill?: string
  /** A fixed body instead of a generated one. */
  readonly body?: string
  /** `Transfer-Encoding: chunked` instead of `Content-Length`. */
  readonly chunked?: boolean
  /**
   * Write at most this many body bytes, then wait for the answer with the body still incomplete.
   * A server that refuses while streaming answers anyway; one that needs the whole body never does
   * (the test times out). This checks "answered before reading the rest" by state, not by how many
   * bytes a loaded machine happened to push before the answer arrived.
   */
  readonly pauseAfter?: number
}

const parseHead = (head: string) => {
  const [statusLine, ...lines] = head.split("\r\n")
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? "")?.[1] ?? 0)
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const i = line.indexOf(":")
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim()
  }
  return { status, headers }
}

/** Sends one request on a fresh connection and resolves with the first complete answer (or the close). */
export const send = (port: number, options: SendOptions): Promise<RawReply> =>
  new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    const total = options.body !== undefined ? Buffer.byteLength(options.body) : options.size ?? 0
    const pattern = Buffer.from(options.fill ?? "a")
    const block = Buffer.alloc(64 * 1024, pattern)
    let sent = 0
    let received = Buffer.alloc(0)
    let done = false
    const finish = (reply: Omit<RawReply, "sent">) => {
      if (done) return
      done = true
      socket.destroy()
      resolve({ ...reply, sent })
    }
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data])
      const end = received.indexOf("\r\n\r\n")
      if (end < 0) return
      const { headers, status } = parseHead(received.subarray(0, end).toString("latin1"))
      const body = received.subarray(end + 4)
      const length = headers["content-length"] === undefined ? undefined : Number(headers["content-length"])
      if (length !== undefined && body.length < length) return
      const text = body.subarray(0, length ?? body.length).toString("utf8")
      let json: unknown
      try {
        json = JSON.parse(text)
      } catch {
        json = undefined
      }
      // Without a length, the answer ends with the connection (or is chunked: fine for these checks).
      if (length !== undefined || headers["transfer-encoding"] === undefined) {
        finish({ status, headers, body: text, json })
      }
    })
    const closed = () => finish({ status: 0, headers: {}, body: "", json: undefined })
    socket.on("error", closed)
    socket.on("close", closed)
    const head = [
      `${options.method ?? "POST"} ${options.target} HTTP/1.1`,
      "host: 127.0.0.1",
      ...Object.entries(options.headers ?? {}).map(([k, v]) => `${k}: ${v}`),
      ...(total === 0 && options.body === undefined
        ? []
        : [options.chunked ? "transfer-encoding: chunked" : `content-length: ${total}`])
    ].join("\r\n") + "\r\n\r\n"
    socket.write(head)
    const source = options.body === undefined ? undefined : Buffer.from(options.body)
    const stop = Math.min(total, options.pauseAfter ?? total)
    const pump = (): void => {
      while (!done && sent < stop) {
        const n = Math.min(block.length, stop - sent)
        const piece = source === undefined ? block.subarray(0, n) : source.subarray(sent, sent + n)
        const frame = options.chunked
          ? Buffer.concat([Buffer.from(`${n.toString(16)}\r\n`), piece, Buffer.from("\r\n")])
          : piece
        sent += n
        if (!socket.write(frame)) {
          socket.once("drain", pump)
          return
        }
      }
      if (!done && options.chunked && sent === total) socket.write("0\r\n\r\n")
    }
    pump()
  })
