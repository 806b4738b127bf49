<?php

declare(strict_types=1);

namespace App;

use Illuminate\Http\Request;
use Illuminate\Routing\Router;
use Illuminate\Support\Facades\Auth;
use Illuminate\Support\ServiceProvider;
use Keyhole\Client;
use Keyhole\Http\Authenticator;
use Keyhole\KeyholeException;
use Symfony\Component\HttpFoundation\Cookie;
use Symfony\Component\HttpFoundation\RedirectResponse;
use Symfony\Component\HttpFoundation\Response;

/**
 * The example's routes: a sign-in page, sign in from an identity token or with Apple on the web, a
 * page for signed-in users only, sign out. (A real app keeps Laravel's CSRF protection on its own
 * forms; this one has no session store. Apple's callback is a cross-site POST by design: the state
 * and the binding cookie are what protect it.)
 */
final class ExampleServiceProvider extends ServiceProvider
{
    /** keyholed's own limit on a token's length (longer ones are token_malformed). */
    private const MAX_ID_TOKEN_BYTES = 16384;

    /** What a refusal code may look like to be shown on the sign-in page (anything else is not shown). */
    private const ERROR_CODE = '/^[a-z_]{1,64}\z/';

    public function boot(): void
    {
        $router = $this->app['router'];

        $router->get('/signin', static function (Request $request) {
            $error = $request->query->all()['error'] ?? null;
            $alert = '';
            if (is_string($error) && preg_match(self::ERROR_CODE, $error) === 1) {
                $alert = '<p role=alert>Sign-in failed (<code>' . htmlspecialchars($error, ENT_QUOTES) . "</code>). Please try again.</p>\n";
            }
            return new Response(
                "<!doctype html><title>Sign in: Keyhole example</title>\n$alert"
                . "<p><a href=\"/auth/apple\">Sign in with Apple</a></p>\n"
                . "<form method=post action=/signin><label>Identity token <input name=id_token></label> <button>Sign in</button></form>\n",
                200,
                ['Content-Type' => 'text/html; charset=utf-8', 'Cache-Control' => 'no-store']
            );
        });

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
            $response->headers->setCookie($this->sessionCookie($session['session']));
            return $response;
        });

        $this->appleRoutes($router);

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

    /**
     * Sign in with Apple on the web: GET /auth/apple starts it (apple.authorize), Apple POSTs its
     * answer to /auth/apple/callback (the Services ID's return URL, in keyholed's `[apple]
     * redirect_uris`), which finishes it (apple.callback).
     */
    private function appleRoutes(Router $router): void
    {
        $router->get('/auth/apple', function (Request $request) {
            // Passed through as it is: keyholed refuses anything off the site.
            $returnTo = $request->query->all()['return_to'] ?? '/';
            if (!is_string($returnTo)) {
                return new Response("return_to is one path on this site.\n", 400, ['Content-Type' => 'text/plain; charset=utf-8']);
            }
            try {
                $start = $this->app->make(Client::class)->appleAuthorize(returnTo: $returnTo);
            } catch (KeyholeException $e) {
                if ($e->code() === 'bad_request') {
                    return new Response("return_to is not a page of this site.\n", 400, ['Content-Type' => 'text/plain; charset=utf-8']);
                }
                return self::unavailable($e);
            }
            if ($start['cookie']['name'] !== $this->appleCookieName()) {
                // Every callback would find no cookie, and fail: say so now. (Names, never values.)
                $this->app['log']->error("keyholed names the Apple binding cookie '{$start['cookie']['name']}', and config keyhole.apple_cookie '{$this->appleCookieName()}'");
                return self::unavailable(null);
            }
            $response = new RedirectResponse($start['url'], 302, ['Cache-Control' => 'no-store']);
            $response->headers->setCookie(VerbatimCookie::of($start['cookie']['set_cookie']));
            return $response;
        });

        $router->post('/auth/apple/callback', function (Request $request) {
            // Apple's fields (state, code, id_token, user, or error), each a string; anything
            // else PHP made of the form (arrays, numeric names) is not Apple's.
            $form = array_filter(
                $request->request->all(),
                static fn ($value, $name) => is_string($name) && is_string($value),
                ARRAY_FILTER_USE_BOTH
            );
            $cookies = array_values(array_filter($request->headers->all('cookie'), 'is_string'));
            $cookie = Authenticator::cookie($cookies, $this->appleCookieName()) ?? '';
            try {
                $done = $this->app->make(Client::class)->appleCallback($form, $cookie);
            } catch (KeyholeException $e) {
                if ($e->isClientSide()) {
                    return self::unavailable($e);
                }
                // Refused (state_invalid, apple_authorization_refused, token_*, ...): the user starts again.
                return new RedirectResponse('/signin?error=' . rawurlencode($e->code()), 303, ['Cache-Control' => 'no-store']);
            }
            $response = new RedirectResponse($done['return_to'], 303, ['Cache-Control' => 'no-store']);
            $response->headers->setCookie($this->sessionCookie($done['session']['session']));
            return $response;
        });
    }

    /** The app's session cookie, for a session token. */
    private function sessionCookie(string $token): Cookie
    {
        return Cookie::create($this->cookieName(), $token, 0, '/', null, true, true, false, Cookie::SAMESITE_LAX);
    }

    /** keyholed could not be asked (or cannot be used): 503, with its hint to retry when it gave one. */
    private static function unavailable(?KeyholeException $e): Response
    {
        $headers = ['Content-Type' => 'text/plain; charset=utf-8', 'Cache-Control' => 'no-store'];
        $retry = $e?->retryAfterMs();
        if ($retry !== null) {
            $headers['Retry-After'] = (string)max(1, (int)ceil($retry / 1000));
        }
        return new Response("Sign-in is unavailable right now.\n", 503, $headers);
    }

    /** The binding cookie's name: keyholed's `[apple] web_cookie`, which /auth/apple checks against apple.authorize's answer. */
    private function appleCookieName(): string
    {
        return $this->app['config']->get('keyhole.apple_cookie', '__Host-kh_apple');
    }

    /** The session cookie's name: the guard's (config keyhole.cookie), so that sign-out revokes what the guard reads. */
    private function cookieName(): string
    {
        return $this->app['config']->get('keyhole.cookie', Authenticator::DEFAULT_COOKIE);
    }
}
