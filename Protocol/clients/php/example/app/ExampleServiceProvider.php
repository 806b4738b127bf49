<?php

declare(strict_types=1);

namespace App;

use Illuminate\Http\Request;
use Illuminate\Support\Facades\Auth;
use Illuminate\Support\ServiceProvider;
use Keyhole\Client;
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
    private const COOKIE = 'kh_session';

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
            $keyhole = $this->app->make(Client::class);
            try {
                $identity = $keyhole->tokenVerify($token);
                $session = $keyhole->sessionCreate($identity['sub'], $identity['issuer']);
            } catch (KeyholeException $e) {
                if (str_starts_with($e->code(), 'token_')) {
                    return new Response("That identity token does not verify.\n", 401, ['Content-Type' => 'text/plain; charset=utf-8']);
                }
                return new Response("Sign-in is unavailable right now.\n", 503, ['Content-Type' => 'text/plain; charset=utf-8']);
            }
            $response = new RedirectResponse('/', 303);
            $response->headers->setCookie(Cookie::create(self::COOKIE, $session['session'], 0, '/', null, true, true, false, Cookie::SAMESITE_LAX));
            return $response;
        });

        $router->post('/signout', function (Request $request) {
            $token = $request->cookies->get(self::COOKIE);
            if (is_string($token) && $token !== '') {
                try {
                    $this->app->make(Client::class)->sessionRevoke($token);
                } catch (KeyholeException $e) {
                    // bad_request: the cookie was not a token, so nothing to revoke; anything
                    // else: the session may still be live, and the user must know.
                    if ($e->code() !== 'bad_request') {
                        return new Response("Sign-out is unavailable right now.\n", 503, ['Content-Type' => 'text/plain; charset=utf-8']);
                    }
                }
            }
            $response = new RedirectResponse('/', 303);
            $response->headers->setCookie(Cookie::create(self::COOKIE, null, 1, '/', null, true, true, false, Cookie::SAMESITE_LAX));
            return $response;
        });
    }
}
