<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\Tests\Support\Harness;
use Keyhole\Tests\Support\HttpApp;
use Keyhole\Tests\Support\Paths;
use Keyhole\Tests\Support\Process;
use PHPUnit\Framework\TestCase;

/** The PSR-15 middleware in an app under PHP's built-in server, over real HTTP, against a real keyholed. */
final class MiddlewareTest extends TestCase
{
    private const APP = __DIR__ . '/Support/psr15_app.php';
    private static Harness $harness;
    private static HttpApp $app;
    private static string $token;
    private static string $sub;

    public static function setUpBeforeClass(): void
    {
        self::$harness = new Harness();
        self::$app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => self::$harness->socket]);
        self::$sub = 'mw-' . bin2hex(random_bytes(4));
        self::$token = (new Client(self::$harness->socket))->sessionCreate(self::$sub, 'local')['session'];
    }

    public static function tearDownAfterClass(): void
    {
        self::$app->stop();
        self::$harness->stop();
    }

    private static function json(array $response): array
    {
        return json_decode($response['body'], true, 512, JSON_THROW_ON_ERROR);
    }

    private static function unknownToken(): string
    {
        return 'kh_' . rtrim(strtr(base64_encode(random_bytes(32)), '+/', '-_'), '=');
    }

    public function testNoCredentialIsAnonymous(): void
    {
        $response = self::$app->request('GET', '/');
        $this->assertSame(200, $response['status']);
        $this->assertSame(['session' => null, 'user' => null], self::json($response));
    }

    public function testRequiredRouteAnswers401WithoutASession(): void
    {
        $response = self::$app->request('GET', '/required');
        $this->assertSame(401, $response['status']);
        $this->assertSame(['Bearer realm="keyhole"'], $response['headers']['www-authenticate']);
    }

    public function testCookieSignsIn(): void
    {
        $response = self::$app->request('GET', '/required', ['Cookie' => 'kh_session=' . self::$token]);
        $this->assertSame(200, $response['status'], $response['body']);
        $body = self::json($response);
        $this->assertSame(self::$sub, $body['session']['sub']);
        $this->assertSame('local', $body['session']['issuer']);
        $this->assertSame(self::$sub, $body['user']['sub']);
    }

    public function testBearerSignsInAndComesBeforeTheCookie(): void
    {
        $response = self::$app->request('GET', '/required', ['Authorization' => 'Bearer ' . self::$token]);
        $this->assertSame(200, $response['status']);
        $this->assertSame(self::$sub, self::json($response)['session']['sub']);

        $response = self::$app->request('GET', '/required', [
            'Authorization' => 'Bearer ' . self::$token,
            'Cookie' => 'kh_session=' . self::unknownToken(),
        ]);
        $this->assertSame(200, $response['status'], 'the Bearer token is used');

        $response = self::$app->request('GET', '/required', [
            'Authorization' => 'Bearer ' . self::unknownToken(),
            'Cookie' => 'kh_session=' . self::$token,
        ]);
        $this->assertSame(401, $response['status'], 'the Bearer token is used, not the cookie');
    }

    public function testQueryStringIsNeverACredential(): void
    {
        $response = self::$app->request('GET', '/required?kh_session=' . self::$token . '&session=' . self::$token);
        $this->assertSame(401, $response['status']);
    }

    public function testUnknownOrRevokedSessionIsAnonymous(): void
    {
        $response = self::$app->request('GET', '/', ['Cookie' => 'kh_session=' . self::unknownToken()]);
        $this->assertSame(200, $response['status']);
        $this->assertNull(self::json($response)['session']);
        $this->assertSame(401, self::$app->request('GET', '/required', ['Cookie' => 'kh_session=not-a-token'])['status']);

        $client = new Client(self::$harness->socket);
        $token = $client->sessionCreate('mw-revoked', 'local')['session'];
        $this->assertSame(200, self::$app->request('GET', '/required', ['Cookie' => "kh_session=$token"])['status']);
        $client->sessionRevoke($token);
        $this->assertSame(401, self::$app->request('GET', '/required', ['Cookie' => "kh_session=$token"])['status']);
    }

    public function testUnreachableKeyholedIs503FailClosed(): void
    {
        $app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => Paths::socket('gone'), 'KEYHOLE_TIMEOUT' => '0.3']);
        try {
            foreach (['/', '/required'] as $path) {
                $response = $app->request('GET', $path, ['Cookie' => 'kh_session=' . self::$token]);
                $this->assertSame(503, $response['status'], $path);
                $this->assertStringNotContainsString(self::$sub, $response['body']);
            }
        } finally {
            $app->stop();
        }
    }

    public function testAnyOtherKeyholedErrorIs503(): void
    {
        // scenario_server's known-error-code answers a session.get with storage_unavailable.
        $socket = Paths::socket('err');
        $server = Process::scenarioServer($socket, 'known-error-code');
        $this->assertSame('ready', $server->readLine(10.0));
        $app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => $socket]);
        try {
            $response = $app->request('GET', '/', ['Cookie' => 'kh_session=' . self::$token]);
            $this->assertSame(503, $response['status']);
            $this->assertSame(['1'], $response['headers']['retry-after']);
        } finally {
            $app->stop();
        }
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    public function testCookieNameOption(): void
    {
        $app = new HttpApp(self::APP, ['KEYHOLE_SOCKET' => self::$harness->socket, 'KH_COOKIE' => 'app_auth']);
        try {
            $this->assertSame(200, $app->request('GET', '/required', ['Cookie' => 'app_auth=' . self::$token])['status']);
            $this->assertSame(401, $app->request('GET', '/required', ['Cookie' => 'kh_session=' . self::$token])['status']);
        } finally {
            $app->stop();
        }
    }

    private static function sessionGets(): int
    {
        return (new Client(self::$harness->socket))->stats()['requests']['session.get'];
    }

    /** A credential without a token's shape is anonymous, and keyholed is not asked. */
    public function testTokenShapeIsCheckedBeforeAskingKeyholed(): void
    {
        $before = self::sessionGets();
        $credentials = [];
        foreach ([70000, 1025] as $length) {
            $credentials[] = ['Cookie' => 'kh_session=kh_' . str_repeat('A', $length - 3)];
            $credentials[] = ['Cookie' => 'kh_session=' . self::$token . str_repeat('A', $length - 46)];
            $credentials[] = ['Authorization' => 'Bearer kh_' . str_repeat('A', $length - 3)];
        }
        $credentials[] = ['Cookie' => 'kh_session=' . substr(self::$token, 0, 45) . '+'];
        $credentials[] = ['Cookie' => 'kh_session=' . substr(self::$token, 0, 45)];
        $credentials[] = ['Cookie' => 'kh_session=%6Bh_' . substr(self::$token, 3)];
        foreach ($credentials as $n => $headers) {
            $this->assertSame(401, self::$app->request('GET', '/required', $headers)['status'], "credential $n");
            $response = self::$app->request('GET', '/', $headers);
            $this->assertSame(200, $response['status'], "credential $n");
            $this->assertNull(self::json($response)['session'], "credential $n");
        }
        $this->assertSame($before, self::sessionGets(), 'keyholed was not asked');
        // A Bearer value not starting kh_ falls back to the cookie.
        $response = self::$app->request('GET', '/required', ['Authorization' => 'Bearer abc', 'Cookie' => 'kh_session=' . self::$token]);
        $this->assertSame(200, $response['status']);
    }

    /**
     * The middleware reads the Cookie header itself (not getCookieParams(), which is PHP's
     * $_COOKIE here): the first cookie of the name wins, and no neighbour hides it.
     *
     * @return array<string, array{string, bool}> a Cookie header (TOKEN: the live session's) and whether it signs in
     */
    public function cookieHeaders(): array
    {
        $unknown = 'kh_' . str_repeat('B', 43);
        return [
            'a=b c' => ['a=b c; kh_session=TOKEN', true],
            'a=é' => ["a=\u{e9}; kh_session=TOKEN", true],
            'JSON value' => ['a={"j":1}; kh_session=TOKEN', true],
            'no =' => ['junk; kh_session=TOKEN', true],
            'empty pairs' => [';;  ; kh_session=TOKEN;', true],
            'kh.session' => ['kh.session=x; kh_session=TOKEN', true],
            'kh session' => ['kh session=x; kh_session=TOKEN', true],
            'kh_session[x]' => ['kh_session[x]=y; kh_session=TOKEN', true],
            '1001 neighbours' => [implode('; ', array_map(fn ($n) => "c$n=1", range(1, 1001))) . '; kh_session=TOKEN', true],
            'quoted' => ['kh_session="TOKEN"', true],
            'first wins' => ['kh_session=TOKEN; kh_session=' . $unknown, true],
            'first wins, unknown' => ["kh_session=$unknown; kh_session=TOKEN", false],
            'first wins, malformed' => ['kh_session=kh_x; kh_session=TOKEN', false],
            'first wins, empty' => ['kh_session=; kh_session=TOKEN', false],
            'name is exact' => ['xkh_session=TOKEN; kh_sessionx=TOKEN', false],
        ];
    }

    /** @dataProvider cookieHeaders */
    public function testHostileCookieHeaders(string $header, bool $signsIn): void
    {
        $response = self::$app->request('GET', '/required', ['Cookie' => str_replace('TOKEN', self::$token, $header)]);
        $this->assertSame($signsIn ? 200 : 401, $response['status'], $response['body']);
        if ($signsIn) {
            $this->assertSame(self::$sub, self::json($response)['session']['sub']);
        }
    }
}
