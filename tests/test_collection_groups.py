"""A collection's groups are the superusers' to set; a name clash reveals nothing."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.test import TestCase
from django.urls import reverse

from kb import permissions
from kb.models import Collection
from tests.base import make_users

SETTINGS = {
    "description": "",
    "chunk_strategy": "structure",
    "chunk_tokens": 200,
    "chunk_overlap": 0,
    "top_k": 5,
    "context_budget": 1200,
    "retrieval_mode": "hybrid",
}


class CollectionGroupsTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        # editor: an admin-group member (may change collections), no superuser
        cls.staff, cls.editor, cls.alice = make_users(permissions.ADMIN)
        cls.legal = Group.objects.create(name="legal-team")
        cls.open = Collection.objects.create(name="Handbook")
        cls.secret = Collection.objects.create(name="Secret")
        cls.secret.groups.add(cls.legal)

    def _change(self, user, collection, **data):
        self.client.force_login(user)
        url = reverse("admin:kb_collection_change", args=[collection.pk])
        return self.client.post(url, {"name": collection.name, **SETTINGS, **data})

    def test_an_admin_member_cannot_set_groups(self):
        response = self._change(self.editor, self.open, groups=[self.legal.pk])
        self.assertEqual(response.status_code, 302)  # saved, groups left alone
        self.assertFalse(self.open.groups.exists())
        self._change(self.staff, self.open, groups=[self.legal.pk])  # a superuser
        self.assertEqual(list(self.open.groups.all()), [self.legal])

    def test_an_admin_member_sees_no_list_of_groups(self):
        self.client.force_login(self.editor)
        url = reverse("admin:kb_collection_change", args=[self.open.pk])
        page = self.client.get(url)
        self.assertEqual(page.status_code, 200)
        self.assertNotContains(page, 'name="groups"')
        self.assertNotContains(page, "legal-team")

    def test_a_hidden_name_is_refused_like_a_visible_one(self):
        self.client.force_login(self.editor)
        url = reverse("admin:kb_collection_add")
        errors = []
        for name in ("Secret", "Handbook"):  # hidden from the editor, and shown
            response = self.client.post(url, {"name": name, **SETTINGS})
            self.assertEqual(response.status_code, 200)
            errors.append(response.context["adminform"].form.errors["name"])
            self.assertNotContains(response, "already exists")
        self.assertEqual(errors[0], errors[1])
        self.assertEqual(errors[0], ["This name cannot be used; choose another."])
        self.assertEqual(Collection.objects.count(), 2)
