from django.urls import path

from kb import views

app_name = "kb"
urlpatterns = [
    path("", views.ask, name="ask"),
    path("api/ask", views.api_ask, name="api-ask"),
    path("kb/sections/<int:pk>/", views.section, name="section"),
    path("kb/sources/<int:pk>/file/", views.source_file, name="source-file"),
]
