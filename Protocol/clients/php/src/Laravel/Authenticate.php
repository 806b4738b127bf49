<?php

declare(strict_types=1);

namespace Keyhole\Laravel;

use Closure;
use Illuminate\Contracts\Auth\Factory as AuthFactory;
use Illuminate\Http\Request;
use Symfony\Component\HttpFoundation\Response;

/**
 * Route middleware "keyhole" (registered by KeyholeServiceProvider):
 *
 *     Route::get('/account', ...)->middleware('keyhole');            // a session is required: else 401
 *     Route::get('/', ...)->middleware('keyhole:optional');          // anonymous allowed
 *     ->middleware('keyhole:required,other-guard')                    // a guard other than "keyhole"
 *
 * Sets the request attributes `keyhole.session` and `keyhole.user` (null when anonymous) and
 * the guard's user. keyholed failing in any way but session_not_found: 503, fail closed.
 */
final class Authenticate
{
    public function __construct(private readonly AuthFactory $auth)
    {
    }

    public function handle(Request $request, Closure $next, string $mode = 'required', ?string $guard = null): mixed
    {
        $keyhole = $this->auth->guard($guard ?? config('keyhole.guard', 'keyhole'));
        if (!$keyhole instanceof KeyholeGuard) {
            throw new \LogicException('the keyhole middleware needs a guard with driver "keyhole"');
        }
        $auth = $keyhole->authentication();
        if ($auth->hasFailed()) {
            $e = KeyholeGuard::unavailable($auth);
            return new Response($e->getMessage() . "\n", 503, $e->getHeaders() + ['Content-Type' => 'text/plain; charset=utf-8', 'Cache-Control' => 'no-store']);
        }
        if (!$auth->isSignedIn() && $mode !== 'optional') {
            return new Response("Not signed in.\n", 401, [
                'WWW-Authenticate' => 'Bearer realm="keyhole"',
                'Content-Type' => 'text/plain; charset=utf-8',
                'Cache-Control' => 'no-store',
            ]);
        }
        $request->attributes->set('keyhole.session', $auth->session());
        $request->attributes->set('keyhole.user', $auth->user());
        $keyhole->user();
        return $next($request);
    }
}
