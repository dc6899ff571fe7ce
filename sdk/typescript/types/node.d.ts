// The few Node.js APIs this package and its tests use, declared here so that the
// build needs TypeScript alone (no @types/node). Everything else comes from the
// standard ES and DOM libraries (fetch, AbortSignal, timers, TextEncoder), which
// Node >= 20 provides. None of these types appears in the package's declarations.

declare var process: {
  readonly pid: number;
  readonly env: Record<string, string | undefined>;
  readonly argv: string[];
  readonly execPath: string;
  readonly platform: string;
  exitCode: number | undefined;
  readonly stdout: { write(chunk: string): boolean };
  readonly stderr: { write(chunk: string): boolean };
  on(event: string, listener: (...args: any[]) => void): unknown;
  off(event: string, listener: (...args: any[]) => void): unknown;
  kill(pid: number, signal?: string): boolean;
  exit(code?: number): never;
  cpuUsage(): { user: number; system: number };
};

declare module "node:os" {
  export function hostname(): string;
  export function loadavg(): number[];
  export function cpus(): unknown[];
}

declare module "node:test" {
  type Fn = (t: { skip(message?: string): void; diagnostic(message: string): void }) => unknown;
  interface TestOptions {
    timeout?: number;
    skip?: boolean | string;
    concurrency?: number | boolean;
  }
  export function test(name: string, fn: Fn): Promise<void>;
  export function test(name: string, options: TestOptions, fn: Fn): Promise<void>;
  export function describe(name: string, fn: () => unknown): Promise<void>;
  export function describe(name: string, options: TestOptions, fn: () => unknown): Promise<void>;
  export function before(fn: () => unknown, options?: { timeout?: number }): void;
  export function after(fn: () => unknown, options?: { timeout?: number }): void;
}

declare module "node:assert/strict" {
  interface Assert {
    (value: unknown, message?: string): asserts value;
    ok(value: unknown, message?: string): asserts value;
    equal<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    notEqual(actual: unknown, expected: unknown, message?: string): void;
    deepEqual<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    match(value: string, pattern: RegExp, message?: string): void;
    rejects(block: Promise<unknown> | (() => Promise<unknown>), error?: unknown, message?: string): Promise<void>;
    throws(block: () => unknown, error?: unknown, message?: string): void;
    fail(message?: string): never;
  }
  const assert: Assert;
  export default assert;
}

declare module "node:child_process" {
  interface Readable {
    on(event: "data", listener: (chunk: { toString(): string }) => void): unknown;
    setEncoding(enc: string): unknown;
  }
  export interface ChildProcess {
    readonly pid: number | undefined;
    readonly exitCode: number | null;
    readonly stdout: Readable | null;
    readonly stderr: Readable | null;
    kill(signal?: string): boolean;
    on(event: "exit", listener: (code: number | null, signal: string | null) => void): unknown;
    on(event: "error", listener: (err: Error) => void): unknown;
    once(event: "exit", listener: (code: number | null, signal: string | null) => void): unknown;
  }
  export function spawn(
    command: string,
    args: string[],
    options?: { cwd?: string; env?: Record<string, string | undefined>; stdio?: unknown; detached?: boolean },
  ): ChildProcess;
}

declare module "node:fs" {
  export function mkdtempSync(prefix: string): string;
  export function readdirSync(path: string): string[];
  export function readFileSync(path: string, encoding: "utf8"): string;
  export function rmSync(path: string, options?: { recursive?: boolean; force?: boolean }): void;
}

declare module "node:path" {
  export function join(...parts: string[]): string;
  export function dirname(path: string): string;
  export function resolve(...parts: string[]): string;
}

declare module "node:url" {
  export function fileURLToPath(url: string | URL): string;
}

declare module "node:net" {
  interface Server {
    listen(port: number, host: string, cb: () => void): unknown;
    address(): { port: number } | string | null;
    close(cb?: () => void): unknown;
  }
  export function createServer(): Server;
}

declare module "node:http" {
  export interface IncomingMessage {
    readonly statusCode?: number;
    readonly statusMessage?: string;
    readonly headers: Record<string, string | string[] | undefined>;
    setEncoding(enc: string): unknown;
    on(event: "data", listener: (chunk: string) => void): unknown;
    on(event: "end" | "close", listener: () => void): unknown;
    on(event: "error", listener: (err: Error) => void): unknown;
  }
  export interface ClientRequest {
    on(event: "error", listener: (err: Error) => void): unknown;
    end(body?: Uint8Array): unknown;
    destroy(err?: unknown): unknown;
  }
  export interface RequestOptions {
    method?: string;
    headers?: Record<string, string | number>;
    signal?: AbortSignal;
  }
  export function request(url: string, options: RequestOptions, callback: (res: IncomingMessage) => void): ClientRequest;
}

declare module "node:https" {
  export function request(
    url: string,
    options: import("node:http").RequestOptions,
    callback: (res: import("node:http").IncomingMessage) => void,
  ): import("node:http").ClientRequest;
}
