// Type-checks index.d.ts as an app would use it: tsc -p test/types (Debian: node-typescript).
import { Client, KeyholeError, middleware, tokenFromRequest, isSessionToken, OPERATIONS, Session } from '../..';
import type { IncomingMessage, ServerResponse } from 'node:http';

async function main(): Promise<void> {
  const client = new Client({ socketPath: '/run/keyhole/keyhole.sock', timeoutMs: 2000, retryOverloaded: true });
  const created = await client.createSession('alice', { ttlSeconds: 3600, data: { theme: 'dark' } });
  const session: Session = await client.getSession(created.session);
  const sub: string = session.sub;
  const email: string | undefined = session.user?.email;
  await client.revokeSession({ id: session.id });
  await client.updateUser(sub, { email: null });
  const verified = await client.verifyToken('x', { audience: 'a' });
  const authorization = await client.appleAuthorize({ returnTo: '/account', scope: 'name' });
  const setCookie: string = authorization.cookie.set_cookie;
  const signedIn = await client.appleCallback({ state: authorization.state, code: 'c', id_token: 't' },
    authorization.cookie.value, { session: { ttl_s: 3600 } });
  const returnTo: string = signedIn.return_to;
  await client.appleCallback(new URLSearchParams('state=s&error=user_cancelled_authorize'), 'cookie');
  console.log(authorization.url, setCookie, signedIn.session.session, returnTo);
  const raw = await client.call('debug.echo', { n: 1 });
  console.log(sub, email, verified.issuer, raw, OPERATIONS['ping'].safeToRepeat);
  try {
    await client.ping();
  } catch (e) {
    if (e instanceof KeyholeError && e.code === 'overloaded') console.log(e.retryAfterMs, e.appleError);
  }
  await client.close();
}

const mw = middleware({ required: true, cookieName: 'sid', onError: (error, _req, res) => console.log(error, res.statusCode) });
const maybe: unknown = 'kh_x';
if (isSessionToken(maybe)) console.log(maybe.length);
declare const req: IncomingMessage;
declare const res: ServerResponse;
mw(req, res, () => {
  const who: string | undefined = req.keyhole?.session?.sub;
  console.log(who, tokenFromRequest(req));
});
// @ts-expect-error: an unknown option
new Client({ socket: 'x' });
// @ts-expect-error: sessions are created for a sub
client2().createSession(42);
function client2(): Client { return new Client(); }
// @ts-expect-error: Apple's form is an object of strings, not a string
client2().appleCallback('state=s', 'cookie');
// @ts-expect-error: the option is returnTo
client2().appleAuthorize({ return_to: '/' });
main();
