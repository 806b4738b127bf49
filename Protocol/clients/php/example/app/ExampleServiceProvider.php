<?php

declare(strict_types=1);

namespace App;

use Illuminate\Http\Request;
use Illuminate\Support\Facades\Auth;
use Illuminate\Support\ServiceProvider;
use Keyhole\Client;
use Keyhole\Http\Authenticator;
use Keyhole\KeyholeException;
use Symfony\Component\HttpFoundation\Cookie;
use Symfony\Component\HttpFoundation\RedirectResponse;
use Symfony\Component\HttpFoundation\Response;

/**
 * The example's routes: sign in from an identity token, a page for signed-in users only, sign out.
 * (A real app keeps Laravel's CSRF protection on these forms; this one has no session store.)
 */
final class ExampleServiceProvider extends ServiceProvider
{
    /** keyholed's own limit on a token's length (longer ones are token_malformed). */
    private const MAX_ID_TOKEN_BYTES = 16384;

    public function boot(): void
    {
        $router = $this->app['router'];

        $router->get('/', static function (Request $request) {
            $user = Auth::user(); // a Keyhole\Laravel\KeyholeUser: the keyhole middleware required one
            $sub = htmlspecialchars($user->sub(), ENT_QUOTES);
            $issuer = htmlspecialchars($user->issuer(), ENT_QUOTES);
            return new Response(
                "<!doctype html><title>Keyhole example</title>\n<p>Signed in as <b>$sub</b> ($issuer).</p>\n"
                . "<form method=post action=/signout><button>Sign out</button></form>\n",
                200,
                ['Content-Type' => 'text/html; charset=utf-8', 'Cache-Control' => 'no-store']
            );
        })->middleware('keyhole');

        $router->get('/me', static function (Request $request) {
            return ['session' => $request->attributes->get('keyhole.session'), 'user' => $request->attributes->get('keyhole.user')];
        })->middleware('keyhole:optional');

        $router->post('/signin', function (Request $request) {
            $token = $request->input('id_token');
            if (!is_string($token) || $token === '') {
                return new Response("id_token is required.\n", 400, ['Content-Type' => 'text/plain; charset=utf-8']);
            }
            if (strlen($token) > self::MAX_ID_TOKEN_BYTES) {
                // No identity token is that long: refused without asking keyholed.
                return new Response("That identity token does not verify.\n", 401, ['Content-Type' => 'text/plain; charset=utf-8']);
            }
            $keyhole = $this->app->make(Client::class);
            $unavailable = new Response("Sign-in is unavailable right now.\n", 503, ['Content-Type' => 'text/plain; charset=utf-8']);
            try {
                $identity = $keyhole->tokenVerify($token);
            } catch (KeyholeException $e) {
                // token_*: it does not verify; bad_request: keyholed would not take it as a token.
                // Either way the token is at fault, not keyholed: 401, never 503.
                if (str_starts_with($e->code(), 'token_') || $e->code() === 'bad_request') {
                    return new Response("That identity token does not verify.\n", 401, ['Content-Type' => 'text/plain; charset=utf-8']);
                }
                return $unavailable;
            }
            try {
                $session = $keyhole->sessionCreate($identity['sub'], $identity['issuer']);
            } catch (KeyholeException) {
                return $unavailable;
            }
            $response = new RedirectResponse('/', 303);
            $response->headers->setCookie(Cookie::create($this->cookieName(), $session['session'], 0, '/', null, true, true, false, Cookie::SAMESITE_LAX));
            return $response;
        });

        $router->post('/signout', function (Request $request) {
            // The cookie as the keyhole middleware reads it; one without a token's shape is no
            // session, and nothing is revoked.
            $token = Authenticator::cookie($request->headers->all('cookie'), $this->cookieName());
            if (Authenticator::isToken($token)) {
                try {
                    $this->app->make(Client::class)->sessionRevoke($token);
                } catch (KeyholeException $e) {
                    // The session may still be live, and the user must know.
                    return new Response("Sign-out is unavailable right now.\n", 503, ['Content-Type' => 'text/plain; charset=utf-8']);
                }
            }
            $response = new RedirectResponse('/', 303);
            $response->headers->setCookie(Cookie::create($this->cookieName(), null, 1, '/', null, true, true, false, Cookie::SAMESITE_LAX));
            return $response;
        });
    }

    /** The session cookie's name: the guard's (config keyhole.cookie), so that sign-out revokes what the guard reads. */
    private function cookieName(): string
    {
        return $this->app['config']->get('keyhole.cookie', Authenticator::DEFAULT_COOKIE);
    }
}
