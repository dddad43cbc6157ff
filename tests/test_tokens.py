"""API tokens: revocation, expiry, password changes, listing, the admin page."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone

from kb import access, permissions
from kb.models import ApiToken
from tests.base import make_users


class TokenTestCase(TestCase):
    url = reverse("kb:api-ask")

    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, cls.alice = make_users()

    def _post(self, key: str):
        # No collection exists: a valid token gets as far as a JSON 400/404,
        # an invalid one stops at 401.
        return self.client.post(
            self.url,
            json.dumps({"question": "When should I roll back?"}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )

    def _assert_works(self, key: str):
        self.assertNotEqual(self._post(key).status_code, 401)

    def _assert_refused(self, key: str):
        response = self._post(key)
        self.assertEqual(response.status_code, 401)
        self.assertEqual(response.json()["error"], "Authentication required.")

    def test_it_refuses_a_revoked_token(self):
        key = access.create_token(self.editor, "ci")
        self._assert_works(key)
        out = StringIO()
        call_command("kb_token", "--revoke", "ci", stdout=out)
        self.assertIn("Revoked 1 token(s)", out.getvalue())
        self._assert_refused(key)

    def test_it_revokes_by_id(self):
        key = access.create_token(self.editor, "ci")
        other = access.create_token(self.editor, "laptop")
        token = ApiToken.objects.get(name="ci")
        call_command("kb_token", "--revoke", str(token.pk), stdout=StringIO())
        self._assert_refused(key)
        self._assert_works(other)

    def test_it_refuses_an_expired_token(self):
        key = access.create_token(self.editor, "ci", expires_days=1)
        self._assert_works(key)
        ApiToken.objects.update(expires=timezone.now() - timedelta(seconds=1))
        self._assert_refused(key)

    def test_the_command_sets_an_expiry(self):
        out = StringIO()
        call_command("kb_token", "editor", "--expires-days", "7", stdout=out)
        token = ApiToken.objects.get()
        self.assertAlmostEqual(
            token.expires - timezone.now(), timedelta(days=7), delta=timedelta(60)
        )
        self._assert_works(out.getvalue().strip())

    def test_it_refuses_a_token_after_a_password_change(self):
        key = access.create_token(self.editor, "ci")
        self._assert_works(key)
        self.editor.set_password("a-new-password-9")
        self.editor.save()
        self._assert_refused(key)

    def test_a_user_who_loses_staff_loses_their_tokens(self):
        key = access.create_token(self.editor, "ci")
        self.editor.is_staff = False
        self.editor.save()
        self.editor.is_staff = True  # given back: the token stays revoked
        self.editor.save()
        self._assert_refused(key)
        deactivated = access.create_token(self.staff, "ci2")
        self.staff.is_active = False
        self.staff.save()
        self.staff.is_active = True
        self.staff.save()
        self._assert_refused(deactivated)

    def test_a_bulk_demotion_revokes_the_tokens_at_their_next_use(self):
        # QuerySet.update sends no pre_save signal (issue #26).
        users = get_user_model().objects
        key = access.create_token(self.editor, "ci")
        self._assert_works(key)
        users.filter(pk=self.editor.pk).update(is_staff=False)
        response = self._post(key)
        self.assertEqual(response.status_code, 403)
        self.assertIn("Only staff", response.json()["error"])
        users.filter(pk=self.editor.pk).update(is_staff=True)  # given back
        self._assert_refused(key)
        self.assertEqual(ApiToken.objects.get(name="ci").state(), "revoked")
        deactivated = access.create_token(self.staff, "ci2")
        users.filter(pk=self.staff.pk).update(is_active=False)
        self.assertEqual(
            ApiToken.objects.get(name="ci2").state(), "user inactive or not staff"
        )
        self._assert_refused(deactivated)
        users.filter(pk=self.staff.pk).update(is_active=True)
        self._assert_refused(deactivated)

    def test_last_used_is_written_at_most_once_a_minute(self):
        key = access.create_token(self.editor, "ci")
        self._post(key)
        first = ApiToken.objects.get().last_used
        self.assertIsNotNone(first)
        self._post(key)
        self.assertEqual(ApiToken.objects.get().last_used, first)
        ApiToken.objects.update(last_used=first - timedelta(minutes=2))
        self._post(key)
        self.assertGreater(ApiToken.objects.get().last_used, first)

    def test_list_shows_tokens_without_secrets(self):
        key = access.create_token(self.editor, "ci")
        access.create_token(self.staff, "old")
        call_command("kb_token", "--revoke", "old", stdout=StringIO())
        out = StringIO()
        call_command("kb_token", "--list", stdout=out)
        lines = out.getvalue().splitlines()
        self.assertEqual(len(lines), 3)
        self.assertIn("\tci\teditor\t", lines[1])
        self.assertTrue(lines[1].endswith("\tactive"))
        self.assertTrue(lines[2].endswith("\trevoked"))
        self.assertNotIn(key, out.getvalue())

    def test_a_second_token_of_the_same_name_is_refused(self):
        call_command("kb_token", "editor", "--name", "ci", stdout=StringIO())
        with self.assertRaisesMessage(CommandError, "A token named 'ci' is in use"):
            call_command("kb_token", "staff", "--name", "ci", stdout=StringIO())
        self.assertEqual(ApiToken.objects.filter(name="ci").count(), 1)
        call_command("kb_token", "--revoke", "ci", stdout=StringIO())
        call_command("kb_token", "staff", "--name", "ci", stdout=StringIO())  # free
        self.assertEqual(ApiToken.objects.filter(name="ci").count(), 2)

    def test_the_old_invocation_still_creates_a_token(self):
        out = StringIO()
        call_command("kb_token", "editor", "--name", "ci", stdout=out)
        self.assertTrue(out.getvalue().startswith(access.TOKEN_PREFIX))
        self._assert_works(out.getvalue().strip())


class TokenAdminTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        # An admin-group member: may change collections, not see tokens.
        cls.staff, cls.editor, cls.alice = make_users(permissions.ADMIN)
        cls.key = access.create_token(cls.editor, "ci")

    def test_superusers_list_and_revoke_tokens(self):
        self.client.force_login(self.staff)
        self.assertContains(self.client.get(reverse("admin:index")), "API tokens")
        url = reverse("admin:kb_apitoken_changelist")
        response = self.client.get(url)
        self.assertContains(response, "ci")
        self.assertContains(response, "active")
        self.assertNotContains(response, self.key)
        token = ApiToken.objects.get()
        self.assertNotContains(response, token.key_hash)
        self.client.post(
            url, {"action": "revoke", "_selected_action": [token.pk]}, follow=True
        )
        self.assertIsNotNone(ApiToken.objects.get().revoked)

    def test_the_page_is_closed_to_staff_who_are_not_superusers(self):
        self.client.force_login(self.editor)
        url = reverse("admin:kb_apitoken_changelist")
        self.assertEqual(self.client.get(url).status_code, 403)
        token = ApiToken.objects.get()
        change = reverse("admin:kb_apitoken_change", args=[token.pk])
        self.assertIn(self.client.get(change).status_code, (302, 403))
        self.assertNotContains(self.client.get(reverse("admin:index")), "API tokens")
