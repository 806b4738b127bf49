<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\Tests\Support\Harness;
use Keyhole\Tests\Support\HttpApp;
use Keyhole\Tests\Support\Paths;
use Keyhole\Tests\Support\Process;
use PHPUnit\Framework\TestCase;

/**
 * The example app (Laravel 8 from Debian's php-laravel-framework, with the Keyhole guard and
 * middleware) under PHP's built-in server, over real HTTP, against a real keyholed whose Apple
 * audience is a web client returning to the example's /auth/apple/callback.
 */
final class ExampleAppTest extends TestCase
{
    private const APP = __DIR__ . '/../example/public/index.php';
    private const APPLE_CALLBACK = 'https://example.com/auth/apple/callback';
    private static Harness $harness;
    private static HttpApp $app;

    public static function setUpBeforeClass(): void
    {
        self::$harness = Harness::withAppleWeb(self::APPLE_CALLBACK);
        self::$app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => self::$harness->socket]);
    }

    public static function tearDownAfterClass(): void
    {
        self::$app->stop();
        self::$harness->stop();
    }

    private static function signIn(string $idToken): array
    {
        return self::$app->request('POST', '/signin', [], http_build_query(['id_token' => $idToken]));
    }

    public function testSignInPageSignOut(): void
    {
        $response = self::signIn(self::$harness->token);
        $this->assertSame(303, $response['status'], $response['body']);
        $this->assertSame(['/'], $response['headers']['location']);
        $this->assertCount(1, $response['headers']['set-cookie']);
        $cookie = $response['headers']['set-cookie'][0];
        $this->assertMatchesRegularExpression('/^kh_session=(kh_[A-Za-z0-9_-]{43});/', $cookie);
        $attributes = array_map('strtolower', array_map('trim', explode(';', $cookie)));
        foreach (['httponly', 'secure', 'samesite=lax', 'path=/'] as $attribute) {
            $this->assertContains($attribute, $attributes, $cookie);
        }
        preg_match('/^kh_session=([^;]+)/', $cookie, $m);
        $session = $m[1];

        $page = self::$app->request('GET', '/', ['Cookie' => "kh_session=$session"]);
        $this->assertSame(200, $page['status'], $page['body']);
        $this->assertStringContainsString(htmlspecialchars(self::$harness->sub), $page['body']);

        $me = self::$app->request('GET', '/me', ['Authorization' => "Bearer $session"]);
        $this->assertSame(200, $me['status']);
        $this->assertSame(self::$harness->sub, json_decode($me['body'], true)['session']['sub'], 'the guard takes a Bearer token');

        $out = self::$app->request('POST', '/signout', ['Cookie' => "kh_session=$session"], '');
        $this->assertSame(303, $out['status'], $out['body']);
        $this->assertSame(['/'], $out['headers']['location']);
        $cleared = strtolower($out['headers']['set-cookie'][0]);
        $this->assertStringStartsWith('kh_session=', $cleared);
        $this->assertStringContainsString('max-age=0', $cleared);

        $again = self::$app->request('GET', '/', ['Cookie' => "kh_session=$session"]);
        $this->assertSame(401, $again['status'], 'the old cookie no longer signs in');
        $this->assertSame(['Bearer realm="keyhole"'], $again['headers']['www-authenticate']);
    }

    public function testNotSignedIn(): void
    {
        $this->assertSame(401, self::$app->request('GET', '/')['status']);
        $me = self::$app->request('GET', '/me', ['Cookie' => 'kh_session=kh_' . str_repeat('A', 43)]);
        $this->assertSame(200, $me['status']);
        $this->assertSame(['session' => null, 'user' => null], json_decode($me['body'], true));
    }

    public function testForgedTokenNeverSignsIn(): void
    {
        [$head, $payload, $signature] = explode('.', self::$harness->token);
        $signature[5] = $signature[5] === 'A' ? 'B' : 'A';
        $response = self::signIn("$head.$payload.$signature");
        $this->assertSame(401, $response['status']);
        $this->assertArrayNotHasKey('set-cookie', $response['headers']);
        $this->assertSame(401, self::signIn('not-a-token')['status']);
    }

    public function testUnreachableKeyholedIs503(): void
    {
        // A socket file nobody listens on: connections are refused.
        $socket = Paths::socket('dead');
        $listener = stream_socket_server("unix://$socket");
        fclose($listener);
        $this->assertFileExists($socket);
        $app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => $socket, 'KEYHOLE_TIMEOUT' => '0.3']);
        try {
            $page = $app->request('GET', '/', ['Cookie' => 'kh_session=kh_' . str_repeat('A', 43)]);
            $this->assertSame(503, $page['status'], $page['body']);
            $this->assertSame(503, $app->request('GET', '/me', ['Cookie' => 'kh_session=kh_' . str_repeat('B', 43)])['status']);
            $signIn = $app->request('POST', '/signin', [], http_build_query(['id_token' => self::$harness->token]));
            $this->assertSame(503, $signIn['status']);
            $this->assertArrayNotHasKey('set-cookie', $signIn['headers']);
            $start = $app->request('GET', '/auth/apple');
            $this->assertSame(503, $start['status'], $start['body']);
            $this->assertArrayNotHasKey('set-cookie', $start['headers']);
            $callback = $app->request('POST', '/auth/apple/callback', ['Cookie' => '__Host-kh_apple=' . str_repeat('C', 43)],
                http_build_query(['state' => str_repeat('S', 43), 'error' => 'user_cancelled_authorize']));
            $this->assertSame(503, $callback['status'], $callback['body']);
            $this->assertArrayNotHasKey('set-cookie', $callback['headers']);
        } finally {
            $app->stop();
            @unlink($socket);
        }
    }

    public function testAnyOtherKeyholedErrorIs503(): void
    {
        $socket = Paths::socket('err');
        $server = Process::scenarioServer($socket, 'known-error-code');
        $this->assertSame('ready', $server->readLine(10.0));
        $app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => $socket]);
        try {
            $page = $app->request('GET', '/', ['Cookie' => 'kh_session=kh_' . str_repeat('A', 43)]);
            $this->assertSame(503, $page['status'], $page['body']);
            $this->assertSame(['1'], $page['headers']['retry-after']);
        } finally {
            $app->stop();
        }
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    /** keyholed's request counts by operation. */
    private static function requests(): array
    {
        return (new Client(self::$harness->socket))->stats()['requests'];
    }

    public function testIdTokenLongerThan16KiBIs401WithoutAskingKeyholed(): void
    {
        $before = self::requests()['token.verify'];
        foreach ([16385, 70000] as $length) {
            $response = self::signIn(str_repeat('a', $length));
            $this->assertSame(401, $response['status'], "$length bytes: {$response['body']}");
            $this->assertArrayNotHasKey('set-cookie', $response['headers']);
        }
        $this->assertSame($before, self::requests()['token.verify'], 'keyholed was not asked');
    }

    public function testSignOutRevokesOnlyATokensShape(): void
    {
        $before = self::requests()['session.revoke'];
        foreach (['kh_short', 'kh_' . str_repeat('A', 1022), 'not-a-token'] as $value) {
            $out = self::$app->request('POST', '/signout', ['Cookie' => "kh_session=$value"], '');
            $this->assertSame(303, $out['status'], $out['body']);
            $this->assertStringContainsString('max-age=0', strtolower($out['headers']['set-cookie'][0]));
        }
        $this->assertSame($before, self::requests()['session.revoke'], 'keyholed was not asked');
        // A token's shape is revoked, the first cookie of the name, beside a malformed neighbour.
        $token = (new Client(self::$harness->socket))->sessionCreate('example-out', 'local')['session'];
        $out = self::$app->request('POST', '/signout', ['Cookie' => "a=b c; kh.session=x; kh_session=$token; kh_session=kh_other"], '');
        $this->assertSame(303, $out['status'], $out['body']);
        $this->assertSame($before + 1, self::requests()['session.revoke']);
        $this->assertSame(401, self::$app->request('GET', '/', ['Cookie' => "kh_session=$token"])['status'], 'revoked');
    }

    public function testBadRequestFromTokenVerifyIs401(): void
    {
        $socket = Paths::socket('bad');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/error_server.php', $socket, 'bad_request']);
        $this->assertSame('ready', $server->readLine(10.0));
        $app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => $socket]);
        try {
            $response = $app->request('POST', '/signin', [], http_build_query(['id_token' => self::$harness->token]));
            $this->assertSame(401, $response['status'], $response['body']);
            $this->assertArrayNotHasKey('set-cookie', $response['headers']);
        } finally {
            $app->stop();
            $server->kill();
        }
    }

    /** The guard reads the Cookie header itself: neighbours PHP's $_COOKIE would trip on do not hide the session's. */
    public function testHostileCookieHeaders(): void
    {
        $token = (new Client(self::$harness->socket))->sessionCreate(self::$harness->sub, 'local')['session'];
        $before = self::requests()['session.get'];
        $neighbours = ['a=b c', 'a=é', 'a={"j":1}', 'junk', 'kh.session=x', 'kh session=x', 'kh_session[x]=y',
            implode('; ', array_map(fn ($n) => "c$n=1", range(1, 1001)))];
        foreach ($neighbours as $neighbour) {
            $page = self::$app->request('GET', '/', ['Cookie' => "$neighbour; kh_session=$token"]);
            $this->assertSame(200, $page['status'], "beside '" . substr($neighbour, 0, 20) . "': {$page['body']}");
        }
        $this->assertSame($before + count($neighbours), self::requests()['session.get']);
        $first = self::$app->request('GET', '/', ['Cookie' => 'kh_session=kh_' . str_repeat('A', 43) . "; kh_session=$token"]);
        $this->assertSame(401, $first['status'], 'the first cookie of the name wins');
        $before = self::requests()['session.get'];
        foreach ([70000, 1025] as $length) {
            $page = self::$app->request('GET', '/', ['Cookie' => 'kh_session=kh_' . str_repeat('A', $length - 3)]);
            $this->assertSame(401, $page['status'], "a $length-byte cookie");
            $me = self::$app->request('GET', '/me', ['Cookie' => "kh_session=$token" . str_repeat('A', $length - 46)]);
            $this->assertSame(['session' => null, 'user' => null], json_decode($me['body'], true), "a $length-byte cookie");
        }
        $this->assertSame($before, self::requests()['session.get'], 'keyholed was not asked');
    }

    public function testSignInPageHasTheAppleButton(): void
    {
        $page = self::$app->request('GET', '/signin');
        $this->assertSame(200, $page['status'], $page['body']);
        $this->assertMatchesRegularExpression('~<a href="/auth/apple">Sign in with Apple</a>~', $page['body']);
        $this->assertStringContainsString('<form method=post action=/signin>', $page['body']);
        $this->assertStringNotContainsString('role=alert', $page['body'], 'no error, none shown');
    }

    /** The sign-in page shows a refusal's code, and nothing that is not a code's shape. */
    public function testSignInPageShowsOnlyAnErrorCode(): void
    {
        $page = self::$app->request('GET', '/signin?error=state_invalid');
        $this->assertStringContainsString('<code>state_invalid</code>', $page['body']);
        foreach (['%3Cb%3Ex%3C%2Fb%3E', 'Call+555-0100', 'a&error[]=b', str_repeat('a', 65)] as $error) {
            $page = self::$app->request('GET', "/signin?error=$error");
            $this->assertSame(200, $page['status'], $page['body']);
            $this->assertStringNotContainsString('role=alert', $page['body'], $error);
        }
    }

    /**
     * GET /auth/apple: a 302 to Apple with the callback's redirect URI, and keyholed's binding
     * cookie as keyholed wrote it (Symfony would have written its own spelling).
     *
     * @return array{state: string, cookie: string}
     */
    private function startApple(string $query = ''): array
    {
        $start = self::$app->request('GET', "/auth/apple$query");
        $this->assertSame(302, $start['status'], $start['body']);
        $location = $start['headers']['location'][0];
        $this->assertStringStartsWith('http://127.0.0.1:9/auth/authorize?', $location);
        $this->assertStringContainsString('redirect_uri=https%3A%2F%2Fexample.com%2Fauth%2Fapple%2Fcallback', $location);
        $this->assertStringContainsString('no-store', strtolower(implode(',', $start['headers']['cache-control'])));
        parse_str((string)parse_url($location, PHP_URL_QUERY), $params);
        $this->assertMatchesRegularExpression('/^[A-Za-z0-9_-]{43}$/', $params['state']);

        $this->assertCount(1, $start['headers']['set-cookie']);
        $setCookie = $start['headers']['set-cookie'][0];
        $this->assertStringStartsWith('__Host-kh_apple=', $setCookie);
        $this->assertSame(1, preg_match('/^__Host-kh_apple=([A-Za-z0-9_-]{43});/', $setCookie, $m), $setCookie);
        $direct = (new Client(self::$harness->socket))->appleAuthorize()['cookie'];
        $this->assertSame(str_replace($direct['value'], $m[1], $direct['set_cookie']), $setCookie, 'as keyholed wrote it');
        return ['state' => $params['state'], 'cookie' => $m[1]];
    }

    public function testAppleStartRedirectsToAppleWithTheBindingCookie(): void
    {
        $first = $this->startApple();
        $this->assertNotSame($first, $this->startApple('?return_to=%2Faccount%3Ftab%3D1'), 'a new state and cookie each time');
    }

    /** return_to goes to keyholed as it is, which refuses anything off the site: 400, no cookie. */
    public function testAppleStartRefusesAnOffSiteReturnTo(): void
    {
        foreach (['//evil.example', 'https://evil.example/', '/ok not', '', 'x[]=1&return_to[]=/'] as $returnTo) {
            $query = str_contains($returnTo, '&') ? $returnTo : 'return_to=' . str_replace('%2F', '/', rawurlencode($returnTo));
            $start = self::$app->request('GET', "/auth/apple?$query");
            $this->assertSame(400, $start['status'], "$query: {$start['body']}");
            $this->assertArrayNotHasKey('set-cookie', $start['headers'], $query);
            $this->assertArrayNotHasKey('location', $start['headers'], $query);
        }
        $this->assertSame(302, self::$app->request('GET', '/auth/apple?return_to=/account')['status']);
    }

    /**
     * POST /auth/apple/callback: each refusal is a 303 to the sign-in page naming its code,
     * which the page shows, and no session cookie.
     */
    private function assertAppleRefusal(string $cookieHeader, array $form, string $code): void
    {
        $headers = $cookieHeader === '' ? [] : ['Cookie' => $cookieHeader];
        $response = self::$app->request('POST', '/auth/apple/callback', $headers, http_build_query($form));
        $this->assertSame(303, $response['status'], $response['body']);
        $this->assertSame(["/signin?error=$code"], $response['headers']['location']);
        $this->assertArrayNotHasKey('set-cookie', $response['headers'], 'no session cookie');
        foreach (array_merge([$cookieHeader], array_values($form)) as $secret) {
            if (strlen($secret) >= 43) {
                $this->assertStringNotContainsString($secret, $response['body']);
            }
        }
        $page = self::$app->request('GET', $response['headers']['location'][0]);
        $this->assertSame(200, $page['status']);
        $this->assertStringContainsString("<code>$code</code>", $page['body']);
    }

    public function testAppleCallbackRefusalsGoBackToTheSignInPage(): void
    {
        // Apple's error, with the right state and cookie (among neighbours).
        $start = $this->startApple();
        $this->assertAppleRefusal("a=b; __Host-kh_apple={$start['cookie']}; kh_session=x",
            ['state' => $start['state'], 'error' => 'user_cancelled_authorize'], 'apple_authorization_refused');

        // Another browser's cookie.
        $start = $this->startApple();
        $other = $this->startApple();
        $this->assertAppleRefusal("__Host-kh_apple={$other['cookie']}", ['state' => $start['state'], 'code' => 'c', 'id_token' => 'x'], 'state_invalid');

        // No cookie at all.
        $start = $this->startApple();
        $this->assertAppleRefusal('', ['state' => $start['state'], 'code' => 'c', 'id_token' => 'x'], 'state_invalid');

        // The same fields with the right cookie pass the state and reach the token: the cookie was
        // what failed above.
        $start = $this->startApple();
        $this->assertAppleRefusal("__Host-kh_apple={$start['cookie']}", ['state' => $start['state'], 'code' => 'c', 'id_token' => 'x'], 'token_malformed');
        // ... and serve one callback.
        $this->assertAppleRefusal("__Host-kh_apple={$start['cookie']}", ['state' => $start['state'], 'code' => 'c', 'id_token' => 'x'], 'state_invalid');
    }

    /** A binding cookie name other than keyholed's would fail every callback: /auth/apple says so at once. */
    public function testAppleStartWithAnotherCookieNameThanKeyholedsIs503(): void
    {
        $app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => self::$harness->socket, 'KEYHOLE_APPLE_COOKIE' => 'kh_apple']);
        try {
            $start = $app->request('GET', '/auth/apple');
            $this->assertSame(503, $start['status'], $start['body']);
            $this->assertArrayNotHasKey('set-cookie', $start['headers']);
            $this->assertArrayNotHasKey('location', $start['headers']);
        } finally {
            $app->stop();
        }
    }
}
