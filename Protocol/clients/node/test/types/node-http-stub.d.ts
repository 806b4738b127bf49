// Just enough of node:http for index.d.ts without @types/node (which Debian does not package).
declare module 'node:http' {
  export class IncomingMessage { headers: Record<string, string | string[] | undefined>; }
  export class ServerResponse { statusCode: number; end(body?: string): void; }
}
