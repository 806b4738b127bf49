<?php

declare(strict_types=1);

namespace Keyhole\Laravel;

use Illuminate\Support\ServiceProvider;
use Keyhole\Client;
use Keyhole\Http\Authenticator;

/**
 * Registers the Keyhole client (a singleton: one connection per worker), the "keyhole" auth
 * driver (Auth::extend) and the "keyhole" route middleware.
 *
 * config/keyhole.php (all optional): 'socket' (else $KEYHOLE_SOCKET, else
 * /run/keyhole/keyhole.sock), 'timeout' (seconds, 5), 'persistent' (false), 'cookie'
 * ('kh_session'), 'guard' (the guard the middleware uses, 'keyhole'). config/auth.php:
 *
 *     'guards' => ['keyhole' => ['driver' => 'keyhole']],   // 'cookie' => ... per guard, too
 */
final class KeyholeServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->app->singleton(Client::class, static function ($app): Client {
            $config = $app['config']->get('keyhole', []);
            $options = ['timeout' => (float)($config['timeout'] ?? 5.0), 'persistent' => (bool)($config['persistent'] ?? false)];
            return new Client($config['socket'] ?? null, $options);
        });
    }

    public function boot(): void
    {
        $this->app['auth']->extend('keyhole', function ($app, string $name, array $config): KeyholeGuard {
            $cookie = $config['cookie'] ?? $app['config']->get('keyhole.cookie', Authenticator::DEFAULT_COOKIE);
            $guard = new KeyholeGuard(new Authenticator($app->make(Client::class), $cookie), $app['request']);
            $app->refresh('request', $guard, 'setRequest');
            return $guard;
        });
        $this->app['router']->aliasMiddleware('keyhole', Authenticate::class);
    }
}
