<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Harness;
use PHPUnit\Framework\TestCase;

/**
 * Sign in with Apple on the web (apple.authorize, apple.callback) through the typed helpers,
 * against a real keyholed whose Apple audience is a web client with a redirect URI.
 */
final class AppleWebTest extends TestCase
{
    private const REDIRECT_URI = 'https://example.com/apple/callback';

    private static ?Harness $harness = null;

    public static function setUpBeforeClass(): void
    {
        self::$harness = Harness::withAppleWeb(self::REDIRECT_URI);
    }

    public static function tearDownAfterClass(): void
    {
        $status = self::$harness?->stop();
        self::$harness = null;
        if ($status !== 0) {
            throw new \RuntimeException("keyholed_harness exited with $status");
        }
    }

    private function client(): Client
    {
        return new Client(self::$harness->socket);
    }

    /** The call's KeyholeException code; fails the test when the call succeeds. */
    private function codeOf(callable $call, string $what): string
    {
        try {
            $call();
        } catch (KeyholeException $e) {
            $this->assertFalse($e->isClientSide(), "$e");
            return $e->code();
        }
        $this->fail("$what succeeded");
    }

    public function testAuthorizeWithDefaults(): void
    {
        $answer = $this->client()->appleAuthorize();
        $this->assertStringStartsWith('http://127.0.0.1:9/auth/authorize?', $answer['url']);
        $this->assertStringContainsString('state=' . $answer['state'], $answer['url']);
        $this->assertStringContainsString('response_mode=form_post', $answer['url']);
        $this->assertStringContainsString('client_id=' . rawurlencode(self::$harness->audience), $answer['url']);
        $this->assertStringContainsString('redirect_uri=' . rawurlencode(self::REDIRECT_URI), $answer['url']);
        $this->assertIsInt($answer['expires_at']);
        $cookie = $answer['cookie'];
        $this->assertSame('__Host-kh_apple', $cookie['name']);
        $this->assertSame(600, $cookie['max_age']);
        $this->assertStringStartsWith("__Host-kh_apple={$cookie['value']};", $cookie['set_cookie']);
        foreach (['Secure', 'HttpOnly', 'SameSite=None'] as $attribute) {
            $this->assertStringContainsString($attribute, $cookie['set_cookie']);
        }
        $this->assertNotSame($answer['state'], $this->client()->appleAuthorize()['state'], 'a new state each time');
    }

    /** Arguments given are sent: each changes the answer, or is refused. */
    public function testAuthorizeSendsItsArguments(): void
    {
        $client = $this->client();
        $answer = $client->appleAuthorize(self::$harness->audience, self::REDIRECT_URI, 'email', '/account');
        $this->assertStringContainsString('scope=email&', $answer['url'] . '&');
        $this->assertStringNotContainsString('scope=name', $answer['url']);
        $this->assertSame('bad_request', $this->codeOf(fn () => $client->appleAuthorize(redirectUri: 'https://example.com/other'), 'another redirect URI'));
        $this->assertSame('bad_request', $this->codeOf(fn () => $client->appleAuthorize(scope: 'openid'), 'scope openid'));
    }

    public function testAuthorizeIsNeverAnOpenRedirect(): void
    {
        $this->assertSame('bad_request', $this->codeOf(fn () => $this->client()->appleAuthorize(returnTo: '//evil.example'), 'return_to //evil.example'));
    }

    /** The state serves one callback, and only with its browser's cookie: a wrong one uses it up. */
    public function testCallbackNeedsTheStatesCookieAndUsesTheStateUp(): void
    {
        $client = $this->client();
        $answer = $client->appleAuthorize();
        $other = $client->appleAuthorize()['cookie']['value']; // another browser's cookie
        $form = ['state' => $answer['state'], 'code' => 'c', 'id_token' => 'x'];
        $this->assertSame('state_invalid', $this->codeOf(fn () => $client->appleCallback($form, $other), 'a callback with another cookie'));
        $this->assertSame('state_invalid', $this->codeOf(fn () => $client->appleCallback($form, $answer['cookie']['value']), 'a second callback'));
    }

    public function testCallbackWithAppleErrorIsRefused(): void
    {
        $client = $this->client();
        $answer = $client->appleAuthorize();
        try {
            $client->appleCallback(['state' => $answer['state'], 'error' => 'user_cancelled_authorize'], $answer['cookie']['value']);
            $this->fail('a callback with an error succeeded');
        } catch (KeyholeException $e) {
            $this->assertSame('apple_authorization_refused', $e->code());
            $this->assertStringContainsString('user_cancelled_authorize', $e->getMessage());
        }
    }

    /**
     * With the right state and cookie, the callback gets as far as the token (and `session`, data
     * {} among it, is taken); a session keyholed refuses shows that it is sent.
     */
    public function testCallbackVerifiesTheToken(): void
    {
        $client = $this->client();
        $answer = $client->appleAuthorize();
        $form = ['state' => $answer['state'], 'code' => 'c', 'id_token' => 'not-a-token'];
        $this->assertSame('token_malformed', $this->codeOf(
            fn () => $client->appleCallback($form, $answer['cookie']['value'], ['ttl_s' => 3600, 'data' => []]),
            'a callback with a malformed token'
        ));
        $answer = $client->appleAuthorize();
        $form = ['state' => $answer['state'], 'code' => 'c', 'id_token' => 'not-a-token'];
        $this->assertSame('bad_request', $this->codeOf(
            fn () => $client->appleCallback($form, $answer['cookie']['value'], ['ttl_s' => 'an hour']),
            'a callback with a session whose ttl_s is not an integer'
        ), 'the session is sent');
    }

    /** An empty form goes as {}: keyholed reads it and finds no id_token (a [] would not be an object). */
    public function testCallbackWithAnEmptyForm(): void
    {
        $cookie = $this->client()->appleAuthorize()['cookie']['value'];
        try {
            $this->client()->appleCallback([], $cookie);
            $this->fail('a callback with no form fields was accepted');
        } catch (KeyholeException $e) {
            $this->assertSame('bad_request', $e->code());
            $this->assertStringContainsString('id_token', $e->getMessage());
        }
    }
}
